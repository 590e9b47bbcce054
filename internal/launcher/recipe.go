package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

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
	"ssh": sshFromRecipe,
}

// FromRecipe re-creates the backend a Recipe describes.
func FromRecipe(r Recipe) (Backend, error) {
	mk, ok := recipeMakers[r.Name]
	if !ok {
		return nil, fmt.Errorf("launcher: unknown backend %q in launch recipe", r.Name)
	}
	return mk(r)
}

// Recipe implements Describer: a proxy in a launch tree re-creates this
// backend with the same policy (host keys, upload, timeouts), reading the
// launcher's ~/.ssh when its host shares that directory (else its own) and
// uploading its own executable where needed.
func (b *SSH) Recipe() Recipe {
	c := b.cfg
	opts := map[string]string{
		"connect_timeout":    c.ConnectTimeout.String(),
		"retries":            strconv.Itoa(c.Retries),
		"keepalive_interval": c.KeepaliveInterval.String(),
		"keepalive_count":    strconv.Itoa(c.KeepaliveCountMax),
	}
	if c.AcceptNew {
		opts["accept_new"] = "1"
	}
	if c.NoProxyUpload {
		opts["no_proxy_upload"] = "1"
	}
	if c.Home != "" {
		opts["home"] = c.Home
	}
	if c.Persist > 0 {
		opts["persist"] = c.Persist.String()
	}
	return Recipe{Name: "ssh", Opts: opts}
}

func sshFromRecipe(r Recipe) (Backend, error) {
	o := r.Opts
	cfg := SSHConfig{AcceptNew: o["accept_new"] == "1", NoProxyUpload: o["no_proxy_upload"] == "1"}
	var errs []error
	dur := func(k string) time.Duration {
		if o[k] == "" {
			return 0
		}
		d, err := time.ParseDuration(o[k])
		errs = append(errs, err)
		return d
	}
	num := func(k string) int {
		if o[k] == "" {
			return 0
		}
		n, err := strconv.Atoi(o[k])
		errs = append(errs, err)
		return n
	}
	cfg.ConnectTimeout, cfg.KeepaliveInterval = dur("connect_timeout"), dur("keepalive_interval")
	cfg.Retries, cfg.KeepaliveCountMax = num("retries"), num("keepalive_count")
	cfg.Persist = dur("persist")
	if cfg.Retries == 0 {
		cfg.Retries = -1 // recorded after defaults: 0 means none
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("launcher: ssh recipe: %w", err)
	}
	if exe, err := os.Executable(); err == nil {
		cfg.LocalProxy = exe
	}
	// The launcher's ~/.ssh is used where the same directory exists here
	// (home directories shared across the cluster, the usual case); else
	// this host's own home.
	if h := o["home"]; h != "" {
		if fi, err := os.Stat(filepath.Join(h, ".ssh")); err == nil && fi.IsDir() {
			cfg.Home = h
		}
	}
	return NewSSH(cfg)
}
