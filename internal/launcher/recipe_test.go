package launcher

import (
	"encoding/json"
	"testing"
	"time"
)

// A recipe survives the trip through the control protocol (JSON) and
// re-creates a backend with the same policy.
func TestRecipeRoundTrip(t *testing.T) {
	home := t.TempDir()
	ssh, err := NewSSH(SSHConfig{Home: home, AcceptNew: true, NoProxyUpload: true, ConnectTimeout: 7 * time.Second,
		Retries: -1, KeepaliveInterval: time.Second, KeepaliveCountMax: 5, Persist: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, be := range []Backend{Fork{}, RSH{Agent: "/usr/bin/kubexec", Args: []string{"-n", "job"}}, ssh} {
		b, _ := json.Marshal(be.(Describer).Recipe())
		var r Recipe
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		t.Setenv("HOME", home)
		got, err := FromRecipe(r)
		if err != nil {
			t.Fatalf("%s: %v", be.Name(), err)
		}
		if got.Name() != be.Name() {
			t.Fatalf("%s came back as %s", be.Name(), got.Name())
		}
		switch want := be.(type) {
		case RSH:
			g := got.(RSH)
			if g.Agent != want.Agent || len(g.Args) != 2 || g.Args[1] != "job" {
				t.Fatalf("rsh recipe: %+v", g)
			}
		case *SSH:
			g := got.(*SSH).cfg
			w := want.cfg
			if g.AcceptNew != w.AcceptNew || g.NoProxyUpload != w.NoProxyUpload || g.ConnectTimeout != w.ConnectTimeout ||
				g.Retries != w.Retries || g.KeepaliveInterval != w.KeepaliveInterval || g.KeepaliveCountMax != w.KeepaliveCountMax ||
				g.Persist != w.Persist {
				t.Fatalf("ssh policy changed on the way:\nwant %+v\ngot  %+v", w, g)
			}
			if g.LocalProxy == "" {
				t.Fatal("a re-created ssh backend must upload its own executable")
			}
		}
	}
	if _, err := FromRecipe(Recipe{Name: "pigeon"}); err == nil {
		t.Fatal("unknown backend accepted")
	}
	if _, err := FromRecipe(Recipe{Name: "ssh", Opts: map[string]string{"connect_timeout": "soon"}}); err == nil {
		t.Fatal("bad duration accepted")
	}
}
