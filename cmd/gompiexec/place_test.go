package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gompi/gompi/hostfile"
)

func TestParsePlacement(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    placeOpts
		wantErr string
	}{
		{[]string{"-bind-to", "core", "-map-by", "socket", "app"}, placeOpts{bindTo: "core", mapBy: "socket"}, ""},
		{[]string{"--map-by=numa:1", "-binding", "l2cache", "app"}, placeOpts{bindTo: "l2cache", mapBy: "numa"}, ""},
		{[]string{"-mapping", "none", "app"}, placeOpts{}, ""},
		{[]string{"-bind-to", "user:0+2,1+3", "app"}, placeOpts{bindTo: "user:0+2,1+3"}, ""},
		{[]string{"-bind-to", "machine", "-membind", "interleave:1,0", "app"}, placeOpts{bindTo: "machine", membind: "interleave:0-1"}, ""},
		{[]string{"-membind", "firsttouch", "app"}, placeOpts{membind: "firsttouch"}, ""},
		{[]string{"-iface", "eth1", "app"}, placeOpts{iface: "eth1"}, ""},
		{[]string{"-bind-to", "rr", "-map-by", "core", "app"}, placeOpts{bindTo: "rr", mapBy: "core"}, ""},
		{[]string{"-map-by", "user:1", "app"}, placeOpts{}, `-map-by "user:1": unknown type "user"`},
		{[]string{"-map-by", "rr", "app"}, placeOpts{}, `-map-by "rr": unknown type "rr"`},
		{[]string{"-map-by", "sockets", "app"}, placeOpts{}, `unknown type "sockets"`},
		{[]string{"-membind", "spread", "app"}, placeOpts{}, `unknown policy "spread"`},
		{[]string{"-bind-to", "user:x", "app"}, placeOpts{}, `rank 0's CPUs "x"`},
		{[]string{"-iface=", "app"}, placeOpts{}, "empty interface name"},
	} {
		o, err := parseArgs(tc.args)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: err %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil || o.place != tc.want {
			t.Errorf("%v: %+v, %v; want %+v", tc.args, o.place, err, tc.want)
		}
	}
}

// Hydra's variables fill what the command line leaves unset, and a host
// file's binding= is checked and normalized ("none" kept: it replaces
// -bind-to on its host).
func TestPlaceDefaults(t *testing.T) {
	env := map[string]string{"HYDRA_BINDING": "core:1", "HYDRA_MAPPING": "socket", "HYDRA_MEMBIND": "bind:0", "HYDRA_IFACE": "ib0"}
	p := placeOpts{mapBy: "numa"}
	hosts := []hostfile.Host{{Name: "a", Binding: "socket:1"}, {Name: "b", Binding: "none"}, {Name: "c"}}
	if err := placeDefaults(&p, func(k string) string { return env[k] }, hosts); err != nil {
		t.Fatal(err)
	}
	if want := (placeOpts{bindTo: "core", mapBy: "numa", membind: "bind:0", iface: "ib0"}); p != want {
		t.Errorf("got %+v, want %+v", p, want)
	}
	if got := []string{hosts[0].Binding, hosts[1].Binding, hosts[2].Binding}; !reflect.DeepEqual(got, []string{"socket", "none", ""}) {
		t.Errorf("host bindings %q", got)
	}
	for _, tc := range []struct {
		env   map[string]string
		hosts []hostfile.Host
		want  string
	}{
		{map[string]string{"HYDRA_MAPPING": "cores"}, nil, `HYDRA_MAPPING=cores: -map-by "cores": unknown type`},
		{nil, []hostfile.Host{{Name: "n1", Binding: "core:0"}}, `host n1: binding=core:0: -bind-to "core:0": count "0"`},
	} {
		var p placeOpts
		err := placeDefaults(&p, func(k string) string { return tc.env[k] }, tc.hosts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err %v, want %q", tc.env, tc.hosts, err, tc.want)
		}
	}
}
