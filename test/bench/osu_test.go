package main

import (
	"strings"
	"testing"
	"time"
)

// The driver's parsing and medians, on canned output (no benchmark runs).
func TestRunOSUParse(t *testing.T) {
	res := osuResults{}
	im := impl{key: "gompi", label: "test"}
	for _, out := range []string{"latency 8 3\nlatency 16 4\n", "noise line\nlatency 8 1\n", "latency 8 2\n"} {
		if err := runOSU(res, im, "gompi", []string{"printf", out}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := res.med("gompi", "latency", 8); !ok || v != 2 {
		t.Fatalf("median of 3, 1, 2 = %v, %v", v, ok)
	}
	if v, ok := res.med("gompi", "latency", 16); !ok || v != 4 {
		t.Fatalf("median of 4 = %v, %v", v, ok)
	}
	if _, ok := res.med("mpich", "latency", 8); ok {
		t.Fatal("median of nothing")
	}
	if err := runOSU(res, im, "gompi", []string{"printf", "no figures\n"}, time.Minute); err == nil || !strings.Contains(err.Error(), "no result lines") {
		t.Fatalf("err %v", err)
	}
	if err := runOSU(res, im, "gompi", []string{"false"}, time.Minute); err == nil {
		t.Fatal("failing command accepted")
	}
}
