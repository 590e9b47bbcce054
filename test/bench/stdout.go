package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// stdoutBytes is what the ranks of a stdout case write in all (222 MB, the
// case a user reported: a program printing logs or ASCII dumps).
const stdoutBytes = 222_000_000

// benchStdout times the ranks' output travelling through the launcher to
// its stdout (/dev/null, so that the launcher's path is all that counts):
// test/bench/stdout/prod.c writes 100-byte lines in 4000-byte writes, as a
// program's stdio would. The producer alone (no launcher, its ranks
// writing to /dev/null) is the floor.
func benchStdout(gompi, hydra string, reps int, dir string) error {
	prod := filepath.Join(dir, "prod")
	if out, err := exec.Command("cc", "-O2", "-o", prod, "test/bench/stdout/prod.c").CombinedOutput(); err != nil {
		return fmt.Errorf("cc: %v\n%s", err, out)
	}
	cases := []struct {
		name string
		opts []string
		np   int
	}{
		{"-n 2, 222 MB of lines", nil, 2},
		{"-n 2 -l, 222 MB of lines", []string{"-l"}, 2},
		{"-n 1, 222 MB of lines", nil, 1},
	}
	fmt.Printf("\nstdout throughput, median of %d runs (ranks write 100-byte lines in 4000-byte writes; launcher's stdout is /dev/null)\n\n", reps)
	fmt.Printf("%-28s %12s %12s %12s %8s\n", "case", "producer", "gompiexec", "hydra", "ratio")
	for _, c := range cases {
		rankArgs := []string{prod, strconv.Itoa(stdoutBytes / c.np), "100", "4000"}
		args := append(append(append([]string{}, c.opts...), "-n", strconv.Itoa(c.np)), rankArgs...)
		var ps []time.Duration
		for i := 0; i < reps; i++ {
			d, err := timeProducers(c.np, rankArgs)
			if err != nil {
				return err
			}
			ps = append(ps, d)
		}
		g, h, err := measureWith(timeRunToNull, gompi, hydra, args, reps)
		if err != nil {
			fmt.Printf("%-28s error: %v\n", c.name, err)
			continue
		}
		fmt.Printf("%-28s %12s %12s %12s %7.2fx\n", c.name, round(median(ps)), round(g), round(h), float64(g)/float64(h))
	}
	return nil
}

// timeProducers runs np copies of argv at once, their stdout /dev/null.
func timeProducers(np int, argv []string) (time.Duration, error) {
	start := time.Now()
	cmds := make([]*exec.Cmd, np)
	for i := range cmds {
		cmds[i] = exec.Command(argv[0], argv[1:]...)
		if err := cmds[i].Start(); err != nil {
			return 0, err
		}
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			return 0, fmt.Errorf("%s: %w", argv[0], err)
		}
	}
	return time.Since(start), nil
}

// timeRunToNull times one run with the launcher's stdout /dev/null.
func timeRunToNull(launcher string, args []string) (time.Duration, error) {
	cmd := exec.Command(launcher, args...) // Stdout nil: /dev/null
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %v: %s", launcher, strings.Join(args, " "), err, errb.Bytes())
	}
	return d, nil
}
