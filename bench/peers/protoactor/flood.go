package main

import (
	"errors"
	"flag"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"zlink.invalid/bench/peers/protoactor/messages"
)

// pongCounter is node 1's local actor: it counts Pongs and closes done at want.
type pongCounter struct {
	want, got int
	done      chan struct{}
}

func (c *pongCounter) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*messages.Pong); ok {
		c.got++
		if c.got == c.want {
			close(c.done)
		}
	}
}

type floodResult struct {
	Side       string  `json:"side"`
	Workload   string  `json:"workload"`
	Messages   int     `json:"messages"`
	ElapsedS   float64 `json:"elapsed_s"`
	Rate       float64 `json:"rate"`
	PingSender bool    `json:"ping_sender"`
}

func runFlood(args []string) error {
	var c commonFlags
	fs := flag.NewFlagSet("flood", flag.ExitOnError)
	c.register(fs, "Pings")
	n := fs.Int("messages", 1_000_000, "number of Pings of the measured round")
	pingSender := fs.Bool("ping-sender", true, "Pings carry the sender PID (false: empty Ping, reply PID given once in StartRemote)")
	_ = fs.Parse(args)
	if err := c.check(); err != nil {
		return err
	}
	if *n <= 0 {
		return errors.New("--messages must be > 0")
	}
	watchdog(c.timeout, "flood")

	system, r, err := startNode(c.listen)
	if err != nil {
		return err
	}
	defer r.Shutdown(false)
	echo, err := spawnEcho(r, c.remote, 10*time.Second)
	if err != nil {
		return err
	}
	if c.warmup > 0 {
		if _, err := floodRound(system.Root, echo, c.warmup, *pingSender); err != nil {
			return err
		}
	}
	elapsed, err := floodRound(system.Root, echo, *n, *pingSender)
	if err != nil {
		return err
	}
	secs := elapsed.Seconds()
	return printJSON(floodResult{
		Side: side, Workload: "flood", Messages: *n,
		ElapsedS: round(secs, 6), Rate: round(2*float64(*n)/secs, 1),
		PingSender: *pingSender,
	})
}

// floodRound sends n Pings one-way to echo and waits for the n Pongs; the
// time covers the sends and all the replies (both directions).
func floodRound(root *actor.RootContext, echo *actor.PID, n int, pingSender bool) (time.Duration, error) {
	done := make(chan struct{})
	props := actor.PropsFromProducer(func() actor.Actor { return &pongCounter{want: n, done: done} },
		actor.WithMailbox(actor.Bounded(mailboxSize)))
	self := root.Spawn(props)
	defer root.Stop(self)

	// Handshake as in the published benchmark; it also makes sure both
	// directions of the connection are up before the clock starts.
	if _, err := root.RequestFuture(echo, &messages.StartRemote{Sender: self}, 10*time.Second).Result(); err != nil {
		return 0, err
	}
	ping := &messages.Ping{}
	if pingSender {
		ping.Sender = self
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		root.Send(echo, ping)
	}
	<-done
	return time.Since(start), nil
}
