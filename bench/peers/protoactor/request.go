package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"zlink.invalid/bench/peers/protoactor/messages"
)

type requestResult struct {
	Side     string  `json:"side"`
	Workload string  `json:"workload"`
	InFlight int     `json:"in_flight"`
	Requests int     `json:"requests"`
	ElapsedS float64 `json:"elapsed_s"`
	Rate     float64 `json:"rate"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
}

func runRequest(args []string) error {
	var c commonFlags
	fs := flag.NewFlagSet("request", flag.ExitOnError)
	c.register(fs, "requests")
	m := fs.Int("requests", 100_000, "number of requests of the measured round")
	k := fs.Int("in-flight", 1, "requests in flight: this many goroutines, each doing RequestFuture+Result in a loop")
	reqTimeout := fs.Duration("request-timeout", 10*time.Second, "timeout of one RequestFuture")
	_ = fs.Parse(args)
	if err := c.check(); err != nil {
		return err
	}
	if *m <= 0 || *k <= 0 {
		return errors.New("--requests and --in-flight must be > 0")
	}
	watchdog(c.timeout, "request")

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
		if _, _, err := requestRound(system.Root, echo, c.warmup, *k, *reqTimeout); err != nil {
			return err
		}
	}
	lat, elapsed, err := requestRound(system.Root, echo, *m, *k, *reqTimeout)
	if err != nil {
		return err
	}
	slices.Sort(lat)
	secs := elapsed.Seconds()
	return printJSON(requestResult{
		Side: side, Workload: "request", InFlight: *k, Requests: *m,
		ElapsedS: round(secs, 6), Rate: round(float64(*m)/secs, 1),
		P50us: round(micros(percentile(lat, 0.50)), 1),
		P99us: round(micros(percentile(lat, 0.99)), 1),
	})
}

// requestRound runs total requests split over k goroutines, each waiting for
// its reply before sending the next one, and returns every latency.
func requestRound(root *actor.RootContext, echo *actor.PID, total, k int, timeout time.Duration) ([]time.Duration, time.Duration, error) {
	lat := make([]time.Duration, total)
	errs := make(chan error, k)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < k; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < total; i += k {
				t0 := time.Now()
				res, err := root.RequestFuture(echo, &messages.Request{}, timeout).Result()
				if err != nil {
					errs <- fmt.Errorf("request %d: %w", i, err)
					return
				}
				if _, ok := res.(*messages.Response); !ok {
					errs <- fmt.Errorf("request %d: unexpected reply %T", i, res)
					return
				}
				lat[i] = time.Since(t0)
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	select {
	case err := <-errs:
		return nil, 0, err
	default:
	}
	return lat, elapsed, nil
}

// percentile is the nearest-rank percentile of sorted latencies.
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
