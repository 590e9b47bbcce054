//go:build linux

package shm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRecvSplit(t *testing.T) {
	a, b := pair(t, &Options{RingSize: MinRingSize})
	ctx := context.Background()
	body := bytes.Repeat([]byte("xyz"), 3000) // longer than the ring
	go a.Send(ctx, []byte("HEADER01"), body)
	var hdr [8]byte
	var got []byte
	n, err := b.RecvSplit(ctx, hdr[:], func(n int) []byte {
		if string(hdr[:]) != "HEADER01" {
			t.Errorf("dst called before the header arrived: %q", hdr)
		}
		got = make([]byte, n)
		return got
	})
	if err != nil || n != len(body) || !bytes.Equal(got, body) {
		t.Fatalf("n %d err %v equal %v", n, err, bytes.Equal(got, body))
	}
	// A message shorter than the envelope is consumed and reported.
	if err := a.Send(ctx, []byte("abc"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RecvSplit(ctx, hdr[:], nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short message: %v", err)
	}
	if err := a.Send(ctx, []byte("HEADER02"), []byte{1}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.RecvSplit(ctx, hdr[:], func(int) []byte { return got[:1] }); err != nil || n != 1 || string(hdr[:]) != "HEADER02" {
		t.Fatalf("after a short message: %d %v %q", n, err, hdr)
	}
}

func TestRecvSplitIdle(t *testing.T) {
	a, b := pair(t, &Options{Spin: 20 * time.Microsecond})
	ctx := context.Background()
	idle, cancel := context.WithCancel(ctx)
	res := blocked(func() error {
		_, err := b.RecvSplitIdle(ctx, idle, time.Microsecond, make([]byte, 4), nil)
		return err
	})
	time.Sleep(20 * time.Millisecond) // asleep on the futex
	cancel()
	expect(t, res, ErrIdle, 2*time.Second)
	// Nothing was consumed and the channel still works.
	if err := a.Send(ctx, []byte("head"), []byte("body")); err != nil {
		t.Fatal(err)
	}
	var hdr [4]byte
	var body []byte
	if _, err := b.RecvSplitIdle(ctx, idle, 0, hdr[:], func(n int) []byte { body = make([]byte, n); return body }); err != nil || string(body) != "body" {
		t.Fatalf("after idle: %v %q", err, body)
	}
}

func TestTrySend(t *testing.T) {
	a, b := pair(t, &Options{RingSize: MinRingSize})
	sent := 0
	for {
		ok, err := a.TrySend(nil, make([]byte, 1000))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		sent++
	}
	if sent != MinRingSize/1008 {
		t.Fatalf("sent %d messages of 1000 bytes into a %d-byte ring", sent, MinRingSize)
	}
	if _, err := b.RecvBytes(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.TrySend(nil, make([]byte, 1000)); !ok || err != nil {
		t.Fatalf("after the consumer freed space: %v %v", ok, err)
	}
}

func TestSweepJob(t *testing.T) {
	dir := t.TempDir()
	names := map[string]bool{ // name -> swept
		"gompi-job_1.0123abcd-0-1":   true,
		"gompi-job_1.ffff-2-3":       true,
		"gompi-job_1-0-1":            false, // another naming (Sweep's)
		"gompi-job_1.0123abcd-0-x":   false,
		"gompi-job_12.0123abcd-0-1":  false, // another job
		"gompi-job_1.01-23.ab-0-1":   false,
		"other-job_1.0123abcd-0-1":   false,
		"gompi-job_1.0123abcd-0-1-2": false,
	}
	for n := range names {
		os.WriteFile(filepath.Join(dir, n), nil, 0o600)
	}
	n, err := SweepJob(dir, "job/1") // JobBase turns '/' into '_'
	if err != nil || n != 2 {
		t.Fatalf("swept %d: %v", n, err)
	}
	for name, swept := range names {
		_, err := os.Stat(filepath.Join(dir, name))
		if swept != errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: swept %v, want %v", name, !swept, swept)
		}
	}
	if JobBase("") != "job" || JobBase("kvs_1-2.x") != "kvs_1_2_x" {
		t.Errorf("JobBase: %q %q", JobBase(""), JobBase("kvs_1-2.x"))
	}
}
