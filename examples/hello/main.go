// Command hello is the smallest Go rank program: it learns its rank through
// PMI, publishes where it runs, fences, and greets its right-hand neighbour.
// Run it with: gompiexec -n 4 -l ./hello (or mpiexec.hydra, or alone).
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/gompi/gompi/pmi/client"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	c, err := client.New(ctx)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	me := host + ":pid" + strconv.Itoa(os.Getpid())
	if err := c.Put("where-"+strconv.Itoa(c.Rank()), me); err != nil {
		return err
	}
	if err := c.Fence(ctx); err != nil {
		return err
	}
	right := (c.Rank() + 1) % c.Size()
	there, err := c.Get(ctx, "where-"+strconv.Itoa(right))
	if err != nil {
		return err
	}
	fmt.Printf("hello from rank %d of %d (appnum %d) at %s; rank %d is at %s\n",
		c.Rank(), c.Size(), c.AppNum(), me, right, there)
	return c.Finalize()
}
