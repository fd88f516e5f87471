// Command protoactor-bench is the Proto.Actor Go peer of zlink's remote
// benchmarks: two OS processes on loopback, shaped like Proto.Actor's
// _examples/remote-benchmark (node2 = "echo", node1 = "flood"/"request").
// Results go to stdout as one JSON line, logs go to stderr.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
)

const (
	side = "protoactor"
	// echoKind is the name the echo actor's props are registered under on node 2.
	echoKind = "echo"
	// mailboxSize is the bounded mailbox size used by the published benchmark.
	mailboxSize = 1_000_000
)

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  protoactor-bench echo    --listen 127.0.0.1:PORT
  protoactor-bench flood   --listen 127.0.0.1:PORT2 --remote 127.0.0.1:PORT [--messages N]
  protoactor-bench request --listen 127.0.0.1:PORT2 --remote 127.0.0.1:PORT [--requests M] [--in-flight K]
run "protoactor-bench SUBCOMMAND -h" for all flags
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "echo":
		err = runEcho(os.Args[2:])
	case "flood":
		err = runFlood(os.Args[2:])
	case "request":
		err = runRequest(os.Args[2:])
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "protoactor-bench:", err)
		os.Exit(1)
	}
}

// startNode starts an actor system with Proto.Actor remoting (default remote
// config) listening on listen, which must be a loopback host:port.
func startNode(listen string) (*actor.ActorSystem, *remote.Remote, error) {
	host, port, err := loopbackAddr(listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--listen: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(s *actor.ActorSystem) *slog.Logger {
		return logger.With("lib", "Proto.Actor", "system", s.ID)
	}))
	r := remote.NewRemote(system, remote.Configure(host, port))
	r.Register(echoKind, echoProps())
	r.Start() // listens synchronously, panics if the port is taken
	return system, r, nil
}

// loopbackAddr splits host:port and refuses anything that is not a loopback IP.
func loopbackAddr(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", 0, fmt.Errorf("%q is not a loopback IP address", host)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", portStr)
	}
	return host, port, nil
}

// spawnEcho asks node 2 to spawn a fresh echo actor (remote activation of
// the registered kind), as the published node1 does.
func spawnEcho(r *remote.Remote, addr string, timeout time.Duration) (*actor.PID, error) {
	if _, _, err := loopbackAddr(addr); err != nil {
		return nil, fmt.Errorf("--remote: %w", err)
	}
	res, err := r.Spawn(addr, echoKind, timeout)
	if err != nil {
		return nil, fmt.Errorf("remote spawn of %q on %s: %w", echoKind, addr, err)
	}
	if res.StatusCode != 0 || res.Pid == nil {
		return nil, fmt.Errorf("remote spawn of %q on %s: status %d", echoKind, addr, res.StatusCode)
	}
	return res.Pid, nil
}

// watchdog kills the process with exit 1 if the run takes longer than d.
func watchdog(d time.Duration, what string) {
	if d <= 0 {
		return
	}
	time.AfterFunc(d, func() {
		fmt.Fprintf(os.Stderr, "protoactor-bench: %s timed out after %s\n", what, d)
		os.Exit(1)
	})
}

// commonFlags are the flags shared by flood and request.
type commonFlags struct {
	listen, remote string
	warmup         int
	timeout        time.Duration
}

func (c *commonFlags) register(fs *flag.FlagSet, warmupWhat string) {
	fs.StringVar(&c.listen, "listen", "", "this node's remoting address, loopback host:port (required)")
	fs.StringVar(&c.remote, "remote", "", "address of the echo node, loopback host:port (required)")
	fs.IntVar(&c.warmup, "warmup", 10_000, "number of "+warmupWhat+" of the unmeasured warm-up round")
	fs.DurationVar(&c.timeout, "timeout", 120*time.Second, "exit 1 if the whole run takes longer (0 = never)")
}

func (c *commonFlags) check() error {
	if c.listen == "" || c.remote == "" {
		return errors.New("--listen and --remote are required")
	}
	if c.warmup < 0 {
		return errors.New("--warmup must be >= 0")
	}
	return nil
}

func printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", b)
	return err
}

// round keeps n decimals, to keep the JSON line short.
func round(x float64, n int) float64 {
	p := math.Pow(10, float64(n))
	return math.Round(x*p) / p
}
