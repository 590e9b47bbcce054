package ckpt_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/ckpt/layout"
)

// sshfsClients exports a fresh directory through sftp-server and mounts
// it n times with sshfs -o opts (each mount a client with its own caches,
// as two hosts' would be; ssh is replaced by a script that runs
// sftp-server, so no sshd is needed). It fails under $CI when sshfs or
// FUSE is missing, and skips elsewhere.
func sshfsClients(t *testing.T, n int, opts string) []string {
	t.Helper()
	for _, p := range []string{"sshfs", "fusermount3", "/usr/lib/openssh/sftp-server", "/dev/fuse"} {
		if _, err := os.Stat(p); err != nil {
			if _, lerr := exec.LookPath(p); lerr == nil {
				continue
			}
			if os.Getenv("CI") != "" {
				t.Fatalf("sshfs test needs %s (test/setup.sh installs sshfs and fuse3)", p)
			}
			t.Skipf("needs %s", p)
		}
	}
	dir := t.TempDir()
	export := filepath.Join(dir, "export")
	ssh := filepath.Join(dir, "ssh")
	if err := os.Mkdir(export, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ssh, []byte("#!/bin/sh\nexec /usr/lib/openssh/sftp-server\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for i := 0; i < n; i++ {
		m := filepath.Join(dir, "client"+string(rune('0'+i)))
		if err := os.Mkdir(m, 0o755); err != nil {
			t.Fatal(err)
		}
		o := "ssh_command=" + ssh
		if opts != "" {
			o += "," + opts
		}
		if out, err := exec.Command("sshfs", "-o", o, "server:"+export, m).CombinedOutput(); err != nil {
			t.Fatalf("sshfs -o %s: %v: %s", o, err, out)
		}
		t.Cleanup(func() { exec.Command("fusermount3", "-u", "-z", m).Run() })
		mounts = append(mounts, m)
	}
	return mounts
}

// TestPrefixOwnerOverSSHFS: the prefix owner record works between two
// sshfs clients (a job's rank 0 on one host, another job's on another):
// the second sees the first's refreshes through its client's caches and
// is refused, naming the first; once the first stops refreshing, it takes
// over after the stale time. With sshfs's own defaults and with the
// caching options test/cluster uses (kernel_cache: pages kept across
// opens).
func TestPrefixOwnerOverSSHFS(t *testing.T) {
	const stale = 2 * time.Second
	for _, tc := range []struct{ name, opts string }{
		{"sshfs defaults", ""},
		{"kernel_cache", "kernel_cache,dir_cache=no,attr_timeout=0,entry_timeout=0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := sshfsClients(t, 2, tc.opts)
			other := layout.Owner{Job: "jobA", Host: "hostA", Node: "another-host", Pid: 4242, Start: "1"}
			a, err := layout.ClaimPrefix(context.Background(), m[0], other, stale, func(string) {})
			if err != nil {
				t.Fatal(err)
			}
			stop, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				for {
					select {
					case <-stop:
						return
					case <-time.After(stale / 6):
						if err := a.Refresh(); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}()
			var said string
			_, err = layout.ClaimPrefix(context.Background(), m[1], layout.ThisProcess("jobB"), stale, func(s string) { said += s })
			if !errors.Is(err, layout.ErrPrefixInUse) || !strings.Contains(err.Error(), "pid 4242 on host hostA") {
				close(stop)
				<-done
				t.Fatalf("claim beside a refreshing owner on another client: %v (said %q), want ErrPrefixInUse naming it", err, said)
			}
			close(stop)
			<-done
			b, err := layout.ClaimPrefix(context.Background(), m[1], layout.ThisProcess("jobB"), stale, func(s string) { said += s })
			if err != nil || !strings.Contains(said, "not refreshed for") {
				t.Fatalf("claim after the owner stopped: %v, said %q; want it taken over", err, said)
			}
			if err := a.Refresh(); !errors.Is(err, layout.ErrPrefixInUse) || !strings.Contains(err.Error(), "jobB") {
				t.Fatalf("the old owner's refresh through its client: %v, want ErrPrefixInUse naming jobB", err)
			}
			b.Release()
		})
	}
}

// TestRestartOverSSHFS: the prefix on sshfs (with kernel_cache, which
// keeps file pages across opens), the cache node-local: a job crashed at
// step 60 restarts through another sshfs client (another host's view of
// the prefix, with a cache of its own, empty) from the newest epoch the
// first job flushed, taking the dead job's owner record over, and ends
// with an uninterrupted run's grid.
func TestRestartOverSSHFS(t *testing.T) {
	m := sshfsClients(t, 2, "kernel_cache,dir_cache=no,attr_timeout=0,entry_timeout=0")
	cacheA, cacheB := t.TempDir(), t.TempDir()
	prefixA, prefixB := filepath.Join(m[0], "run"), filepath.Join(m[1], "run")
	r := run(t, heatWith(prefixA, []string{"-ckpoint-cache", cacheA}, "-crash-at", "60")...)
	if r.Code == 0 {
		t.Fatalf("crashing run exited 0:\n%s", r.Stderr)
	}
	flushed, err := layout.Newest(prefixB)
	if err != nil {
		t.Fatalf("no epoch in the prefix after the crash: %v", err)
	}
	r = run(t, heatWith(prefixB, []string{"-ckpoint-cache", cacheB})...)
	if e := restored(r); e != flushed.Epoch {
		t.Fatalf("restored epoch %d, want %d (the newest in the prefix)\nstdout:\n%s\nstderr:\n%s", e, flushed.Epoch, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "took over") {
		t.Fatalf("the crashed job's owner record was not taken over:\n%s", r.Stderr)
	}
	if got := checksum(t, r); got != baseline(t) {
		t.Fatalf("checksum %s, uninterrupted %s", got, baseline(t))
	}
}
