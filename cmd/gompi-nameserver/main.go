// Command gompi-nameserver keeps the names that MPI jobs publish for each
// other (MPI_Publish_name, MPI_Lookup_name across jobs): start it once,
// then give every job's launcher -nameserver HOST[:PORT]. It speaks the
// protocol of MPICH's hydra_nameserver, so mpiexec.hydra jobs can use it
// too, and gompiexec jobs can use hydra_nameserver.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/gompi/gompi/internal/buildinfo"
	"github.com/gompi/gompi/internal/manpage"
	"github.com/gompi/gompi/pmi/nameserver"
	"github.com/spf13/cobra"
)

const help = `gompi-nameserver keeps the names MPI jobs publish for each other. Start it on a
host every job's launcher can reach, then run the jobs with -nameserver HOST[:PORT]:
a rank's MPI_Publish_name in one job is seen by MPI_Lookup_name in another, until
MPI_Unpublish_name or the server's end. It speaks the protocol of MPICH's
hydra_nameserver (the same default port, 6392), so mpiexec.hydra jobs can share it,
and gompiexec jobs can use hydra_nameserver instead. Names live in memory only.

Examples:
  gompi-nameserver &
  gompiexec -nameserver $(hostname) -n 4 ./server &
  gompiexec -nameserver $(hostname) -n 4 ./client
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func command() (*cobra.Command, *int, *bool) {
	cmd := &cobra.Command{
		Use: "gompi-nameserver [-port PORT] [-debug]", Short: "name service shared by MPI jobs (MPI_Publish_name, MPI_Lookup_name)",
		Long: manpage.Preformatted(help), Version: buildinfo.Version(),
		SilenceUsage: true, SilenceErrors: true, DisableFlagsInUseLine: true,
	}
	port := cmd.Flags().Int("port", nameserver.DefaultPort, "TCP port to listen on, every address (also HYDRA_NAMESERVER_PORT)")
	debug := cmd.Flags().Bool("debug", false, "log every request to stderr (also HYDRA_NAMESERVER_DEBUG=1)")
	return cmd, port, debug
}

func run(args []string) int {
	if len(args) == 2 && args[0] == manpage.GenFlag {
		return writeMan(args[1])
	}
	cmd, port, debug := command()
	// Hydra's single-dash long options (-port 7000) as well as --port.
	cmd.SetArgs(longDash(args))
	if v := os.Getenv("HYDRA_NAMESERVER_PORT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gompi-nameserver: HYDRA_NAMESERVER_PORT=%s: not a port number\n", v)
			return 2
		}
		*port = n
	}
	*debug = os.Getenv("HYDRA_NAMESERVER_DEBUG") == "1"
	var serveErr error
	cmd.RunE = func(*cobra.Command, []string) error {
		if *port < 1 || *port > 65535 {
			return fmt.Errorf("-port %d: want 1 to 65535", *port)
		}
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(*port))
		if err != nil {
			return err
		}
		s := &nameserver.Server{}
		if *debug {
			s.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
		}
		// SIGTERM and Ctrl-C close the listener: a clean exit 0.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		go func() { <-sig; ln.Close() }()
		if err := s.Serve(ln); !errors.Is(err, net.ErrClosed) {
			serveErr = err
		}
		return nil
	}
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gompi-nameserver:", err)
		return 2
	}
	if serveErr != nil {
		fmt.Fprintln(os.Stderr, "gompi-nameserver:", serveErr)
		return 1
	}
	return 0
}

// longDash turns Hydra's -port and -debug into --port and --debug.
func longDash(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if name, _, _ := strings.Cut(a, "="); name == "-port" || name == "-debug" || name == "-help" || name == "-version" {
			out[i] = "-" + a
		}
	}
	return out
}

func writeMan(dir string) int {
	cmd, _, _ := command()
	err := manpage.Write(dir, manpage.Page{Cmd: cmd,
		Env: []manpage.Item{
			{"HYDRA_NAMESERVER_PORT", "the port when -port is not given"},
			{"HYDRA_NAMESERVER_DEBUG", "1: log every request (as -debug)"},
		},
		Exit: []manpage.Item{
			{"0", "stopped by SIGTERM or Ctrl-C"},
			{"1", "the listener failed"},
			{"2", "bad arguments, or the port could not be opened"},
		},
		SeeAlso: []string{"gompiexec(1)", "hydra_nameserver(1)"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gompi-nameserver:", err)
		return 1
	}
	return 0
}
