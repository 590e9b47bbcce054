package launcher

import "fmt"

// Recipe describes a backend in a form that travels in the control
// protocol, so a proxy in a launch tree starts the proxies below it exactly
// as gompiexec would have.
type Recipe struct {
	// Name is the backend: "fork", "rsh" or "ssh".
	Name string `json:"name"`
	// Agent and Args are the rsh agent command line (rsh only).
	Agent string   `json:"agent,omitempty"`
	Args  []string `json:"args,omitempty"`
	// Opts holds backend-specific settings (ssh).
	Opts map[string]string `json:"opts,omitempty"`
}

// Describer is implemented by backends that can be re-created elsewhere
// from a Recipe.
type Describer interface {
	Recipe() Recipe
}

// Recipe implements Describer.
func (Fork) Recipe() Recipe { return Recipe{Name: "fork"} }

// Recipe implements Describer.
func (r RSH) Recipe() Recipe { return Recipe{Name: "rsh", Agent: r.Agent, Args: r.Args} }

// recipeMakers builds backends from recipes by name; backends in other
// files register themselves here.
var recipeMakers = map[string]func(Recipe) (Backend, error){
	"fork": func(Recipe) (Backend, error) { return Fork{}, nil },
	"rsh": func(r Recipe) (Backend, error) {
		if r.Agent == "" {
			return nil, fmt.Errorf("launcher: rsh recipe without an agent")
		}
		return RSH{Agent: r.Agent, Args: r.Args}, nil
	},
}

// FromRecipe re-creates the backend a Recipe describes.
func FromRecipe(r Recipe) (Backend, error) {
	mk, ok := recipeMakers[r.Name]
	if !ok {
		return nil, fmt.Errorf("launcher: unknown backend %q in launch recipe", r.Name)
	}
	return mk(r)
}
