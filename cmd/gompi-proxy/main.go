// Command gompi-proxy is gompi's per-host agent. gompiexec starts it (fork,
// ssh or an rsh agent) and speaks the control protocol over its stdin and
// stdout; users do not run it by hand.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gompi/gompi/internal/buildinfo"
	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/launcher"
	"github.com/gompi/gompi/internal/manpage/roff"
	"github.com/gompi/gompi/internal/persist"
	"github.com/gompi/gompi/internal/proxy"
	"github.com/gompi/gompi/runtime/mpiio/journal"
)

// stdio is the session's byte stream: the proxy's stdin and stdout.
type stdio struct{ in, out *os.File }

// newStdio reopens descriptors 0 and 1 in non-blocking mode, so Go's poller
// owns them and Close interrupts a read in progress: yamux waits for its
// reader before a session can end, and a launcher that went silent (a
// heartbeat timeout) would otherwise hold that read forever.
func newStdio() stdio {
	syscall.SetNonblock(0, true)
	syscall.SetNonblock(1, true)
	return stdio{in: os.NewFile(0, "stdin"), out: os.NewFile(1, "stdout")}
}

func (s stdio) Read(b []byte) (int, error)  { return s.in.Read(b) }
func (s stdio) Write(b []byte) (int, error) { return s.out.Write(b) }

// SyscallConn is stdout's: when it is a TCP socket the proxy waits, before
// it exits, until its last frame has been sent (proxy.waitSent).
func (s stdio) SyscallConn() (syscall.RawConn, error) { return s.out.SyscallConn() }

func (s stdio) Close() error {
	s.in.Close()
	return s.out.Close()
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == roff.GenFlag {
		os.Exit(writeMan(os.Args[2]))
	}
	if len(os.Args) > 1 && (os.Args[1] == "-version" || os.Args[1] == "--version") {
		// The build identity is the executable's sha256: the same value the
		// ssh launcher's probe computes with sha256sum and names uploaded
		// copies by (docs/ssh.md).
		fmt.Printf("%s control protocol %d sha256 %s\n", buildinfo.String("gompi-proxy"), control.Version, selfSum())
		return
	}
	if len(os.Args) > 1 && os.Args[1] == proxy.GuardArg {
		os.Exit(proxy.GuardMain(os.Stdin, os.Args[2:]))
	}
	if code, ok := persist.Main(os.Args[1:], os.Stdout); ok {
		os.Exit(code)
	}
	if len(os.Args) > 1 {
		// Launchers start it without arguments; anything else is a person.
		switch os.Args[1] {
		case "-h", "-help", "--help":
			fmt.Print(proxyHelp)
			return
		}
		fmt.Fprintf(os.Stderr, "gompi-proxy: unknown argument %q (gompiexec starts gompi-proxy without arguments; gompi-proxy -help)\n", os.Args[1])
		os.Exit(2)
	}
	level := slog.LevelWarn
	if os.Getenv("GOMPI_PROXY_DEBUG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// Terminal signals go to gompiexec, which forwards them; a SIGTERM or
	// SIGHUP aimed at the proxy itself ends the job on this host: before
	// the session is up at once, after it the ranks get SIGTERM and the
	// job's grace period (proxy.Config.Terminate).
	// Caught rather than ignored: ignored dispositions would be inherited by
	// the ranks, caught ones are reset at exec. Catching SIGPIPE turns a
	// write to a dead launcher into an error we handle.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGPIPE)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	connected, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig := <-term:
			cancel()
			select { // for Run, should the session be up already
			case term <- sig:
			default: // another one is queued
			}
		case <-connected:
		}
	}()
	var heartbeat time.Duration
	if v := os.Getenv(launcher.HeartbeatEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "gompi-proxy: %s=%q: want a duration such as 5s\n", launcher.HeartbeatEnv, v)
			os.Exit(1)
		}
		heartbeat = d
	}
	// The guard of the ranks' process group is this program. Its shell
	// starts now, while the session is set up and the job travels: on
	// the way to the first rank it would cost a fork and an exec.
	guard, _ := os.Executable()
	var started *proxy.Guard
	if guard != "" {
		started = proxy.StartGuard(guard)
	}
	// So is the topology's lookup (the PATH search for lstopo, the cache).
	topo := proxy.PrefetchTopo()
	stream, err := sessionStream(ctx)
	close(connected)
	<-watched
	if ctx.Err() != nil {
		// Also when the signal cut the connect-back short.
		if err == nil {
			stream.Close()
		}
		err = errors.New("terminated by a signal before the job arrived")
	}
	if err != nil {
		if started != nil {
			started.Abandon()
		}
		fmt.Fprintf(os.Stderr, "gompi-proxy: %v\n", err)
		os.Exit(1)
	}
	err = proxy.Run(ctx, stream, proxy.Config{Log: log, Stderr: os.Stderr, Heartbeat: heartbeat, Guard: guard, Started: started, Topo: topo,
		ReplayIOCache: func(dir string) error { _, err := journal.ReplayDir(dir); return err }, Terminate: term})
	if errors.Is(err, proxy.ErrTerminated) {
		// SIGTERM or SIGHUP: scancel, a time limit, a shutdown.
		err = errors.New("gompi-proxy: terminated by a signal; this host's ranks were sent SIGTERM")
	}
	if err != nil && !errors.Is(err, proxy.ErrLauncherLost) && !errors.Is(err, proxy.ErrReported) {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	if err != nil {
		os.Exit(1)
	}
}

// selfSum is the sha256 of this executable, or "unknown".
func selfSum() string {
	sum, err := persist.ExecutableSum()
	if err != nil {
		return "unknown"
	}
	return sum
}
