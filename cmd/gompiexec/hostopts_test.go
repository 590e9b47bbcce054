package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gompi/gompi/hostfile"
)

func TestParseHostOptions(t *testing.T) {
	t.Setenv("HYDRA_CONFIG_FILE", "")
	t.Setenv("HYDRA_RMK", "")
	tests := []struct {
		args  []string
		env   map[string]string
		check func(o *options) bool
	}{
		{[]string{"-rmk", "pbs", "app"}, nil, func(o *options) bool { return o.rmk == "pbs" }},
		{[]string{"-rmk=USER", "app"}, nil, func(o *options) bool { return o.rmk == "user" }},
		{[]string{"app"}, map[string]string{"HYDRA_RMK": "sge"}, func(o *options) bool { return o.rmk == "sge" }},
		{[]string{"-rmk", "lsf", "app"}, map[string]string{"HYDRA_RMK": "sge"}, func(o *options) bool { return o.rmk == "lsf" }},
		{[]string{"-skip-launch-node", "app"}, nil, func(o *options) bool { return o.skipLaunchNode }},
		{[]string{"-order-nodes", "DESCENDING", "app"}, nil, func(o *options) bool { return o.orderNodes == "descending" }},
		{[]string{"-order-nodes", "up", "app"}, nil, func(o *options) bool { return o.orderNodes == "ascending" }},
		{[]string{"-demux", "poll", "-topolib", "hwloc", "-disable-x", "app"}, nil, func(o *options) bool { return len(o.segments) == 1 }},
		{[]string{"app"}, map[string]string{"HYDRA_CKPOINT_PREFIX": "/scratch/a:/scratch/b", "HYDRA_CKPOINT_INT": "90"},
			func(o *options) bool { return o.ckptPrefix == "/scratch/a" && o.ckptInterval == 90*time.Second }},
		{[]string{"-ckpoint-prefix", "/x", "-ckpoint-interval", "5", "app"}, map[string]string{"HYDRA_CKPOINT_PREFIX": "/y", "HYDRA_CKPOINT_INT": "90"},
			func(o *options) bool { return o.ckptPrefix == "/x" && o.ckptInterval == 5*time.Second }},
	}
	for _, tc := range tests {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		o, err := parseArgs(tc.args)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if !tc.check(o) {
			t.Errorf("%v %v: parsed %+v", tc.args, tc.env, o)
		}
		for k := range tc.env {
			t.Setenv(k, "")
		}
	}
}

func TestParseHostOptionErrors(t *testing.T) {
	t.Setenv("HYDRA_CONFIG_FILE", "")
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"-rmk", "condor", "app"}, "", `-rmk "condor": known resource managers are user, slurm, ll, lsf, sge, pbs, cobalt`},
		{[]string{"-rmk", "pbs", "-rmk", "sge", "app"}, "", "duplicate setting: -rmk"},
		{[]string{"app"}, "condor", `HYDRA_RMK="condor"`},
		{[]string{"-order-nodes", "sideways", "app"}, "", `-order-nodes "sideways"`},
		{[]string{"-demux", "epoll", "app"}, "", `-demux "epoll"`},
		{[]string{"-topolib", "plpa", "app"}, "", `-topolib "plpa"`},
		{[]string{"-enable-x", "app"}, "", "-enable-x: gompiexec forwards no X11"},
	} {
		t.Setenv("HYDRA_RMK", tc.env)
		if _, err := parseArgs(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v HYDRA_RMK=%q: %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestArrangeHosts(t *testing.T) {
	h := func(name string, slots int) hostfile.Host { return hostfile.Host{Name: name, Slots: slots} }
	in := []hostfile.Host{h("localhost", 4), h("n1", 2), h("127.0.0.1", 1), h("n2", 8), h("n3", 2)}
	tests := []struct {
		o    hostOpts
		want []hostfile.Host
		err  string
	}{
		{hostOpts{}, in, ""},
		{hostOpts{skipLaunchNode: true}, []hostfile.Host{h("n1", 2), h("n2", 8), h("n3", 2)}, ""},
		{hostOpts{orderNodes: "ascending"}, []hostfile.Host{h("127.0.0.1", 1), h("n1", 2), h("n3", 2), h("localhost", 4), h("n2", 8)}, ""},
		{hostOpts{orderNodes: "descending", skipLaunchNode: true}, []hostfile.Host{h("n2", 8), h("n1", 2), h("n3", 2)}, ""},
	}
	for _, tc := range tests {
		o := &options{hostOpts: tc.o}
		got, err := arrangeHosts(o, append([]hostfile.Host(nil), in...))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v: %v, %v; want %v", tc.o, got, err, tc.want)
		}
	}
	host, _ := os.Hostname()
	if _, err := arrangeHosts(&options{hostOpts: hostOpts{skipLaunchNode: true}}, []hostfile.Host{h("localhost", 1), h(host, 2)}); err == nil ||
		!strings.Contains(err.Error(), "every host of the list is this one") {
		t.Errorf("only the launch node left: %v", err)
	}
}

// -rmk picks the allocation gompiexec reads: "user" none, a named one
// that one even when another is present; HYDRA_USE_LOCALHOST as -f is
// this machine with one slot.
func TestResolveHostsRMK(t *testing.T) {
	pe := filepath.Join(t.TempDir(), "pe")
	os.WriteFile(pe, []byte("g1 3 all.q@g1 UNDEFINED\n"), 0o644)
	t.Setenv("HYDRA_HOST_FILE", "")
	t.Setenv("SLURM_JOB_NODELIST", "s[1-2]")
	t.Setenv("SLURM_TASKS_PER_NODE", "2(x2)")
	t.Setenv("PE_HOSTFILE", pe)
	for _, tc := range []struct {
		o    options
		want []hostfile.Host
	}{
		{options{}, []hostfile.Host{{Name: "s1", Slots: 2}, {Name: "s2", Slots: 2}}},
		{options{hostOpts: hostOpts{rmk: "sge"}}, []hostfile.Host{{Name: "g1", Slots: 3}}},
		{options{hostOpts: hostOpts{rmk: "user"}}, hostfile.Localhost()},
		{options{hostfile: useLocalhost}, []hostfile.Host{{Name: "localhost", Slots: 1}}},
	} {
		got, err := resolveHosts(&tc.o)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%+v: %v, %v; want %v", tc.o.hostOpts, got, err, tc.want)
		}
	}
}
