package mpiexec

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gompi/gompi/hostfile"
	"github.com/gompi/gompi/internal/control"
	"github.com/gompi/gompi/internal/launcher"
)

// shape renders a plan as "0(1,2(3)) 4" so tests can compare trees.
func shape(tops []plannedTop) string {
	var walk func(s control.Subtree) string
	walk = func(s control.Subtree) string {
		out := fmt.Sprint(s.Index)
		if len(s.Children) > 0 {
			var cs []string
			for _, c := range s.Children {
				cs = append(cs, walk(c))
			}
			out += "(" + strings.Join(cs, ",") + ")"
		}
		return out
	}
	var parts []string
	for _, t := range tops {
		parts = append(parts, walk(t.sub))
	}
	return strings.Join(parts, " ")
}

func TestPlanTree(t *testing.T) {
	ssh := launcher.RSH{Agent: "ssh"}
	fork := launcher.Fork{}
	cases := []struct {
		name    string
		hosts   int
		fanout  int
		backend func(i int) launcher.Backend
		want    string
	}{
		{"flat when hosts fit", 4, 32, func(int) launcher.Backend { return ssh }, "0 1 2 3"},
		{"one host", 1, 2, func(int) launcher.Backend { return ssh }, "0"},
		{"binary tree of seven", 7, 2, func(int) launcher.Backend { return ssh }, "0(1,2) 3(4,5(6))"},
		{"fanout 1 is a chain", 4, 1, func(int) launcher.Backend { return ssh }, "0(1(2(3)))"},
		{"all fork trees too", 5, 2, func(int) launcher.Backend { return fork }, "0(1) 2(3,4)"},
		{"local fork among remote stays top", 5, 2, func(i int) launcher.Backend {
			if i == 2 {
				return fork
			}
			return ssh
		}, "0(1) 2 3(4)"},
		{"backend without a recipe stays top", 3, 1, func(i int) launcher.Backend {
			if i == 0 {
				return struct{ launcher.Backend }{fork}
			}
			return ssh
		}, "0 1(2)"},
		{"different agents make separate trees", 4, 1, func(i int) launcher.Backend {
			return launcher.RSH{Agent: fmt.Sprint("agent", i%2)}
		}, "0(2) 1(3)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hosts := make([]hostfile.Host, c.hosts)
			index := map[string]int{}
			for i := range hosts {
				hosts[i] = hostfile.Host{Name: fmt.Sprint("h", i), Slots: 1}
				index[hosts[i].Name] = i
			}
			tops := planTree(hosts, func(h hostfile.Host) launcher.Backend { return c.backend(index[h.Name]) }, c.fanout,
				func(h int) []control.RankSpec { return []control.RankSpec{{Rank: h}} })
			if got := shape(tops); got != c.want {
				t.Fatalf("plan %q, want %q", got, c.want)
			}
			// Every host appears exactly once, with its own ranks.
			seen := map[int]bool{}
			for _, tp := range tops {
				for _, h := range tp.sub.Hosts() {
					if seen[h] {
						t.Fatalf("host %d twice", h)
					}
					seen[h] = true
				}
				if len(tp.sub.Children) > 0 && tp.recipe.Name == "" {
					t.Fatalf("top %d has children but no recipe", tp.sub.Index)
				}
				if !reflect.DeepEqual(tp.sub.Ranks, []control.RankSpec{{Rank: tp.sub.Index}}) {
					t.Fatalf("top %d has ranks %v", tp.sub.Index, tp.sub.Ranks)
				}
			}
			if len(seen) != c.hosts {
				t.Fatalf("%d hosts planned, want %d", len(seen), c.hosts)
			}
		})
	}
}
