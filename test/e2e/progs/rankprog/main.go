// Command rankprog is a rank program for gompiexec's end-to-end tests; its
// first argument picks a behaviour.
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gompi/gompi/internal/shm"
)

func main() {
	rank := os.Getenv("PMI_RANK")
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"env"}
	}
	switch args[0] {
	case "env":
		fmt.Printf("rank=%s size=%s local=%s/%s app=%s args=%s marker=%s\n", rank, os.Getenv("PMI_SIZE"),
			os.Getenv("MPI_LOCALRANKID"), os.Getenv("MPI_LOCALNRANKS"), os.Getenv("GOMPI_APPNUM"),
			strings.Join(args[1:], ","), os.Getenv("GOMPI_TEST_VAR"))
	case "spam":
		// Each line goes out in several writes so only the launcher's line
		// reassembly keeps lines whole.
		n, _ := strconv.Atoi(args[1])
		w := os.Stdout
		for i := 0; i < n; i++ {
			fmt.Fprintf(w, "rank %s line %d ", rank, i)
			fmt.Fprint(w, strings.Repeat("x", 100+i%50))
			fmt.Fprint(w, " end\n")
		}
	case "bytes":
		b := make([]byte, 0, 1024)
		for k := 0; k < 4; k++ {
			for i := 0; i < 256; i++ {
				b = append(b, byte(i))
			}
		}
		os.Stdout.Write(b)
	case "cat":
		n, _ := io.Copy(os.Stdout, bufio.NewReader(os.Stdin))
		fmt.Printf("rank %s read %d bytes\n", rank, n)
	case "exit":
		code, _ := strconv.Atoi(args[1])
		if args[2] == rank {
			os.Exit(code)
		}
		time.Sleep(60 * time.Second)
	case "selfkill":
		if args[1] == rank {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Second)
		}
		time.Sleep(60 * time.Second)
	case "sleep":
		fmt.Printf("rank %s ready\n", rank)
		d, _ := time.ParseDuration(args[1])
		time.Sleep(d)
	case "trap":
		// SIGTERM is caught too: when the first rank exits 130 the launcher
		// terminates the rest, and a rank still about to report its SIGINT
		// must not die of that SIGTERM first.
		c := make(chan os.Signal, 4)
		signal.Notify(c, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGQUIT, syscall.SIGTERM)
		fmt.Printf("rank %s ready\n", rank)
		for s := range c {
			if s == syscall.SIGTERM {
				continue
			}
			fmt.Printf("rank %s got %v\n", rank, s)
			os.Exit(130)
		}
	case "trapstay":
		c := make(chan os.Signal, 4)
		signal.Notify(c, syscall.SIGINT)
		fmt.Printf("rank %s ready\n", rank)
		for s := range c {
			fmt.Printf("rank %s got %v\n", rank, s)
		}
	case "shmcreate":
		// Creates a shared-memory rendezvous file in args[1] for job
		// args[2] as rank 0 and waits for a peer that never comes.
		shm.Connect(context.Background(), args[2], 0, 1, &shm.Options{Dir: args[1], Poll: time.Hour})
	case "ignoreterm":
		signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
		fmt.Printf("rank %s ready\n", rank)
		time.Sleep(60 * time.Second)
	default:
		fmt.Fprintf(os.Stderr, "rankprog: unknown mode %q\n", args[0])
		os.Exit(2)
	}
}
