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

	"github.com/gompi/gompi/internal/proxy"
)

type stdio struct{}

func (stdio) Read(b []byte) (int, error)  { return os.Stdin.Read(b) }
func (stdio) Write(b []byte) (int, error) { return os.Stdout.Write(b) }
func (stdio) Close() error {
	os.Stdin.Close()
	return os.Stdout.Close()
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-version" || os.Args[1] == "--version") {
		fmt.Println("gompi-proxy control protocol 1")
		return
	}
	level := slog.LevelWarn
	if os.Getenv("GOMPI_PROXY_DEBUG") != "" {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// Terminal signals go to gompiexec, which forwards them; a SIGTERM or
	// SIGHUP aimed at the proxy itself ends the job on this host.
	// Caught rather than ignored: ignored dispositions would be inherited by
	// the ranks, caught ones are reset at exec. Catching SIGPIPE turns a
	// write to a dead launcher into an error we handle.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	err := proxy.Run(ctx, stdio{}, proxy.Config{Log: log, Stderr: os.Stderr})
	if err != nil && !errors.Is(err, proxy.ErrLauncherLost) {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
	if err != nil {
		os.Exit(1)
	}
}
