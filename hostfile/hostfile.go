// Package hostfile reads host lists (MPICH machinefiles, Open MPI hostfiles,
// -hosts lists, Slurm and PBS allocations) and places ranks on them.
package hostfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Host is one node of the allocation.
type Host struct {
	Name     string // as written in the host list
	Slots    int    // >= 1
	MaxSlots int    // 0 = no limit (Open MPI max_slots=)
	User     string // optional login user (Hydra's user= token)
	// Binding is Hydra's binding= token: this host's -bind-to value,
	// unchecked here (gompiexec checks it with the rest of the options).
	Binding string
}

// ParseError names the file, line and token that could not be read.
type ParseError struct {
	File  string
	Line  int // 1-based; 0 when the input is not line-based (-hosts lists)
	Token string
	Msg   string
}

func (e *ParseError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Token != "" {
		return fmt.Sprintf("%s: %s in %q", loc, e.Msg, e.Token)
	}
	return fmt.Sprintf("%s: %s", loc, e.Msg)
}

// maxSlots bounds slot counts so arithmetic on them cannot overflow.
const maxSlots = 1 << 20

// Parse reads a hostfile. Lines hold `host`, `host:N`, or `host slots=N
// max_slots=M user=U binding=SPEC`; `#` starts a comment. A host named on
// consecutive lines is one entry whose slots add up (PBS node files list a
// host once per slot); named again after another host, it is a further
// entry, as in Hydra, and placement interleaves (Place).
func Parse(r io.Reader, filename string) ([]Host, error) {
	var hosts []Host
	index := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		perr := func(tok, msg string) error {
			return &ParseError{File: filename, Line: line, Token: tok, Msg: msg}
		}
		h, err := parseHostSpec(fields[0])
		if err != nil {
			return nil, perr(fields[0], err.Error())
		}
		slotsGiven := strings.Contains(fields[0], ":")
		for _, tok := range fields[1:] {
			k, v, ok := strings.Cut(tok, "=")
			if !ok {
				return nil, perr(tok, "expected key=value")
			}
			switch k {
			case "slots", "cpu", "cpus":
				n, err := parseCount(v)
				if err != nil {
					return nil, perr(tok, err.Error())
				}
				if slotsGiven {
					return nil, perr(tok, "slot count given twice")
				}
				h.Slots, slotsGiven = n, true
			case "max_slots", "max-slots":
				n, err := parseCount(v)
				if err != nil {
					return nil, perr(tok, err.Error())
				}
				h.MaxSlots = n
			case "binding":
				if v == "" {
					return nil, perr(tok, "empty binding")
				}
				h.Binding = v
			case "user":
				if v == "" || strings.ContainsAny(v, "@/ \t") {
					return nil, perr(tok, "bad user name")
				}
				h.User = v
			default:
				return nil, perr(tok, "unsupported token (known: slots=, max_slots=, user=, binding=)")
			}
		}
		if h.MaxSlots > 0 && h.MaxSlots < h.Slots {
			return nil, perr(fields[0], fmt.Sprintf("max_slots=%d is less than slots=%d", h.MaxSlots, h.Slots))
		}
		if err := addHost(&hosts, index, h); err != nil {
			return nil, perr(fields[0], err.Error())
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &ParseError{File: filename, Line: line + 1, Msg: err.Error()}
	}
	if len(hosts) == 0 {
		return nil, &ParseError{File: filename, Msg: "no hosts listed"}
	}
	return hosts, nil
}

// addHost appends h to the host list, or adds its slots to the last entry
// when that names the same host (Hydra's rule: only consecutive lines
// merge). Every entry of a host runs under one proxy, so they must agree
// on its user and binding.
func addHost(hosts *[]Host, index map[string]int, h Host) error {
	if j, ok := index[h.Name]; ok {
		if err := compatible((*hosts)[j], h); err != nil {
			return err
		}
	} else {
		index[h.Name] = len(*hosts)
	}
	if last := len(*hosts) - 1; last >= 0 && (*hosts)[last].Name == h.Name {
		return merge(&(*hosts)[last], h)
	}
	*hosts = append(*hosts, h)
	return nil
}

// compatible checks two entries of one host.
func compatible(a, b Host) error {
	if a.User != "" && b.User != "" && a.User != b.User {
		return fmt.Errorf("host %s listed with users %s and %s", a.Name, a.User, b.User)
	}
	if a.Binding != "" && b.Binding != "" && a.Binding != b.Binding {
		return fmt.Errorf("host %s listed with binding=%s and binding=%s", a.Name, a.Binding, b.Binding)
	}
	return nil
}

// merge folds an entry of the same host into dst.
func merge(dst *Host, h Host) error {
	if err := compatible(*dst, h); err != nil {
		return err
	}
	if dst.User == "" {
		dst.User = h.User
	}
	if dst.Binding == "" {
		dst.Binding = h.Binding
	}
	dst.Slots += h.Slots
	if dst.Slots > maxSlots {
		return fmt.Errorf("host %s has more than %d slots", h.Name, maxSlots)
	}
	if h.MaxSlots > 0 || dst.MaxSlots > 0 {
		dst.MaxSlots += h.MaxSlots
		if dst.MaxSlots < dst.Slots {
			dst.MaxSlots = dst.Slots
		}
	}
	return nil
}

// ParseFile reads the hostfile at path.
func ParseFile(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hostfile: %w", err)
	}
	defer f.Close()
	return Parse(f, path)
}

// ParseList reads a -hosts list such as "a,b:2,c".
func ParseList(list string) ([]Host, error) {
	var hosts []Host
	index := map[string]int{}
	for i, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		perr := func(msg string) error {
			return &ParseError{File: "-hosts", Token: item, Msg: fmt.Sprintf("entry %d: %s", i+1, msg)}
		}
		if item == "" {
			return nil, perr("empty host name")
		}
		h, err := parseHostSpec(item)
		if err != nil {
			return nil, perr(err.Error())
		}
		if err := addHost(&hosts, index, h); err != nil {
			return nil, perr(err.Error())
		}
	}
	return hosts, nil
}

// parseHostSpec reads `host` or `host:N`. A third field (`host:2:3`) is
// refused: nothing defines its meaning, and silently ignoring it hides a typo.
func parseHostSpec(s string) (Host, error) {
	parts := strings.SplitN(s, ":", 3)
	h := Host{Name: parts[0], Slots: 1}
	if err := checkName(h.Name); err != nil {
		return Host{}, err
	}
	if len(parts) > 2 {
		return Host{}, fmt.Errorf("unexpected field %q after the slot count (want host or host:N)", parts[2])
	}
	if len(parts) > 1 {
		n, err := parseCount(parts[1])
		if err != nil {
			return Host{}, err
		}
		h.Slots = n
	}
	return h, nil
}

func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("empty host name")
	}
	if len(name) > 255 {
		return fmt.Errorf("host name longer than 255 bytes")
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f || strings.ContainsRune("/\\,;=@\"'`$", r) {
			return fmt.Errorf("bad character %q in host name", r)
		}
	}
	return nil
}

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("bad slot count %q", s)
	}
	if n < 1 || n > maxSlots {
		return 0, fmt.Errorf("slot count %d out of range 1..%d", n, maxSlots)
	}
	return n, nil
}

// Localhost is the default allocation: this machine with one slot per CPU.
func Localhost() []Host {
	return []Host{{Name: "localhost", Slots: runtime.NumCPU()}}
}
