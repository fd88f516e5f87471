package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"zlink.invalid/bench/peers/protoactor/messages"
)

// echoActor is node 2's actor. Ping is answered with one Pong, sent one-way
// to the PID carried by the Ping (or, for an empty Ping, to the PID received
// in StartRemote, as in the current published benchmark). Request is
// answered with Respond(Response).
type echoActor struct {
	replyTo *actor.PID
}

func (a *echoActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *messages.Ping:
		to := msg.Sender
		if to == nil {
			to = a.replyTo
		}
		ctx.Send(to, &messages.Pong{})
	case *messages.Request:
		ctx.Respond(&messages.Response{})
	case *messages.StartRemote:
		a.replyTo = msg.Sender
		ctx.Respond(&messages.Start{})
	}
}

func echoProps() *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &echoActor{} },
		actor.WithMailbox(actor.Bounded(mailboxSize)))
}

func runEcho(args []string) error {
	fs := flag.NewFlagSet("echo", flag.ExitOnError)
	listen := fs.String("listen", "", "remoting address, loopback host:port (required)")
	maxLife := fs.Duration("timeout", 30*time.Minute, "exit 1 after this long, in case nobody stops it (0 = never)")
	_ = fs.Parse(args)
	if *listen == "" {
		return fmt.Errorf("--listen is required")
	}
	watchdog(*maxLife, "echo node")

	_, r, err := startNode(*listen)
	if err != nil {
		return err
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	stdinClosed := make(chan struct{})
	if stdinIsWatchable() {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			close(stdinClosed)
		}()
	}

	fmt.Println("ready")

	select {
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "protoactor-bench: echo node got %s, stopping\n", s)
	case <-stdinClosed:
		fmt.Fprintln(os.Stderr, "protoactor-bench: echo node's stdin closed, stopping")
	}
	r.Shutdown(false)
	return nil
}

// stdinIsWatchable reports whether stdin is a pipe, socket or terminal, whose
// end means "stop". /dev/null (what a background job of a non-interactive
// shell gets), a regular file or a closed stdin are ignored, so that the echo
// node then runs until signalled.
func stdinIsWatchable() bool {
	fi, err := os.Stdin.Stat()
	if err != nil {
		return false
	}
	m := fi.Mode()
	if m&(os.ModeNamedPipe|os.ModeSocket) != 0 {
		return true
	}
	if m&os.ModeCharDevice != 0 {
		null, err := os.Stat(os.DevNull)
		return err == nil && !os.SameFile(fi, null)
	}
	return false
}
