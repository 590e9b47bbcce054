package launcher

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
)

// Errors of the SSH backend, for errors.Is. The concrete errors are
// *HostKeyError and *AuthError, which name the host.
var (
	// ErrUnknownHostKey: the host is not in known_hosts (and AcceptNew is off).
	ErrUnknownHostKey = errors.New("unknown host key")
	// ErrHostKeyMismatch: known_hosts has a different key for the host.
	ErrHostKeyMismatch = errors.New("host key mismatch")
	// ErrHostKeyRevoked: the host's key is marked @revoked in known_hosts.
	ErrHostKeyRevoked = errors.New("host key revoked")
	// ErrAuth: the server accepted none of our credentials.
	ErrAuth = errors.New("ssh authentication failed")
)

// sshTarget is one host after ssh_config resolution.
type sshTarget struct {
	alias      string // as given in the host list
	hostname   string // after HostName
	addr       string // hostname:port
	port       string
	user       string
	identities []string // IdentityFile entries, expanded
	knownHosts []string // files checked
	appendTo   string   // file new keys go to under accept-new
	acceptNew  bool
	jump       []string // ProxyJump hops, [user@]host[:port], first hop first
}

// resolveHop resolves one ProxyJump hop, [user@]host[:port]. Its own
// ProxyJump is not followed: the list gives the whole route, as in OpenSSH.
func (b *SSH) resolveHop(hop string) (*sshTarget, error) {
	login, hostport, ok := strings.Cut(hop, "@")
	if !ok {
		login, hostport = "", hop
	}
	host, port := hostport, ""
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	}
	t, err := b.resolve(host, login)
	if err != nil {
		return nil, fmt.Errorf("jump host %s: %w", hop, err)
	}
	if port != "" {
		t.port = port
		t.addr = net.JoinHostPort(t.hostname, port)
	}
	t.jump = nil
	return t, nil
}

// resolve applies ssh_config to host (user@host wins over User).
func (b *SSH) resolve(host, login string) (*sshTarget, error) {
	if host == "" {
		return nil, errors.New("ssh: empty host name")
	}
	get := func(key string) string {
		if b.sshCfg == nil {
			return ""
		}
		v, _ := b.sshCfg.Get(host, key)
		return v
	}
	t := &sshTarget{alias: host, hostname: host, port: "22", user: login}
	if hn := get("HostName"); hn != "" {
		t.hostname = strings.ReplaceAll(hn, "%h", host)
	}
	if p := get("Port"); p != "" {
		t.port = p
	}
	if t.user == "" {
		t.user = get("User")
	}
	if t.user == "" {
		t.user = b.cfg.User
	}
	if t.user == "" {
		t.user = os.Getenv("USER")
	}
	if t.user == "" {
		if u, err := user.Current(); err == nil {
			t.user = u.Username
		}
	}
	// Silently connecting directly would fail obscurely (or reach the
	// wrong machine): say what is unsupported and what to use instead.
	if v := get("ProxyCommand"); v != "" && !strings.EqualFold(v, "none") {
		return nil, fmt.Errorf("ssh %s: ~/.ssh/config sets ProxyCommand, which the built-in SSH client does not support; use ProxyJump, or -launcher-exec ssh (OpenSSH) for this host", host)
	}
	if v := get("ProxyJump"); v != "" && !strings.EqualFold(v, "none") {
		for _, hop := range strings.Split(v, ",") {
			if hop = strings.TrimSpace(hop); hop != "" {
				t.jump = append(t.jump, strings.TrimPrefix(hop, "ssh://"))
			}
		}
	}
	t.addr = net.JoinHostPort(t.hostname, t.port)
	expand := func(p string) string {
		r := strings.NewReplacer("%d", b.cfg.Home, "%h", t.hostname, "%r", t.user, "%u", os.Getenv("USER"),
			"%p", t.port, "%n", host, "%%", "%")
		p = r.Replace(p)
		if p == "~" {
			return b.cfg.Home
		}
		if strings.HasPrefix(p, "~/") {
			return filepath.Join(b.cfg.Home, p[2:])
		}
		return p
	}
	if b.sshCfg != nil {
		ids, _ := b.sshCfg.GetAll(host, "IdentityFile")
		for _, id := range ids {
			t.identities = append(t.identities, expand(id))
		}
	}
	var userKH []string
	ukh := strings.Fields(get("UserKnownHostsFile"))
	for _, f := range ukh {
		if f != "/dev/null" && f != "none" {
			userKH = append(userKH, expand(f))
		}
	}
	if len(ukh) > 0 && len(userKH) == 0 {
		// "UserKnownHostsFile /dev/null": no host is ever known, as with
		// OpenSSH; with accept-new (StrictHostKeyChecking no) every key is
		// taken and nothing recorded.
		t.knownHosts, t.appendTo = nil, ""
	} else {
		// The same file may be named twice (UserKnownHostsFile pointing
		// at the default): read and report it once.
		seen := map[string]bool{}
		t.knownHosts = nil
		for _, f := range append(userKH, b.cfg.KnownHosts...) {
			if !seen[filepath.Clean(f)] {
				seen[filepath.Clean(f)] = true
				t.knownHosts = append(t.knownHosts, f)
			}
		}
		t.appendTo = t.knownHosts[0]
	}
	switch strings.ToLower(get("StrictHostKeyChecking")) {
	case "accept-new", "no", "off":
		// "no" is taken as accept-new: a changed key is never accepted.
		t.acceptNew = true
	}
	t.acceptNew = t.acceptNew || b.cfg.AcceptNew
	return t, nil
}

// authMethods offers the agent's keys, then identity files (IdentityFile,
// else the default names); notes say what was skipped and why.
func (b *SSH) authMethods(t *sshTarget) ([]ssh.AuthMethod, []string, func()) {
	var notes []string
	var ag agent.ExtendedAgent
	closeAgent := func() {}
	switch sock := b.cfg.AgentSocket; sock {
	case "", "none":
		notes = append(notes, "no ssh-agent (SSH_AUTH_SOCK unset)")
	default:
		conn, err := net.Dial("unix", sock)
		if err != nil {
			notes = append(notes, fmt.Sprintf("ssh-agent at %s unreachable: %v", sock, err))
			break
		}
		ag = agent.NewClient(conn)
		closeAgent = func() { conn.Close() }
	}
	files, explicit := t.identities, true
	if len(files) == 0 {
		explicit = false
		for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			files = append(files, filepath.Join(b.cfg.Home, ".ssh", n))
		}
	}
	var signers []ssh.Signer
	var tried []string
	found := false
	for _, f := range files {
		pem, err := os.ReadFile(f)
		if err != nil {
			if explicit || !errors.Is(err, os.ErrNotExist) {
				notes = append(notes, fmt.Sprintf("identity %s: %v", f, err))
			}
			continue
		}
		found = true
		s, err := ssh.ParsePrivateKey(pem)
		var pm *ssh.PassphraseMissingError
		switch {
		case errors.As(err, &pm):
			notes = append(notes, fmt.Sprintf("identity %s is passphrase-protected: add it to ssh-agent (ssh-add %s)", f, f))
			continue
		case err != nil:
			notes = append(notes, fmt.Sprintf("identity %s: %v", f, err))
			continue
		}
		signers = append(signers, s)
		tried = append(tried, f)
	}
	if len(tried) > 0 {
		notes = append(notes, "tried "+strings.Join(tried, ", "))
	} else if !found && !explicit {
		notes = append(notes, "no usable ~/.ssh/id_ed25519, id_ecdsa or id_rsa")
	}
	// One publickey method: x/crypto tries each method name only once, so
	// agent and file keys must come from the same callback.
	method := ssh.PublicKeysCallback(func() ([]ssh.Signer, error) {
		var all []ssh.Signer
		if ag != nil {
			if as, err := ag.Signers(); err == nil {
				all = append(all, as...)
			}
		}
		return append(all, signers...), nil
	})
	return []ssh.AuthMethod{method}, notes, closeAgent
}

// AuthError says the server at Host refused every credential offered.
type AuthError struct {
	Host, User, Addr string
	Notes            []string // what was tried or skipped
	Err              error
}

func (e *AuthError) Error() string {
	s := fmt.Sprintf("ssh %s@%s (%s): authentication failed: %v", e.User, e.Host, e.Addr, e.Err)
	if len(e.Notes) > 0 {
		s += " [" + strings.Join(e.Notes, "; ") + "]"
	}
	return s
}

func (e *AuthError) Unwrap() []error { return []error{ErrAuth, e.Err} }

func isAuthFailure(err error) bool {
	s := err.Error()
	return strings.Contains(s, "unable to authenticate") || strings.Contains(s, "no supported methods remain") ||
		strings.Contains(s, "Too many authentication failures")
}

// HostKeyError is an unknown, changed or revoked host key. errors.Is
// matches it against ErrUnknownHostKey, ErrHostKeyMismatch or
// ErrHostKeyRevoked.
type HostKeyError struct {
	Host        string // as given in the host list
	Addr        string // host:port whose key was checked
	KeyType     string
	Fingerprint string // SHA256:...
	Known       []knownhosts.KnownKey
	Files       []string // known_hosts files consulted
	Err         error
}

func (e *HostKeyError) Unwrap() error { return e.Err }

func (e *HostKeyError) Error() string {
	host, port, _ := net.SplitHostPort(e.Addr)
	switch e.Err {
	case ErrUnknownHostKey:
		return fmt.Sprintf("ssh %s (%s): unknown host key %s %s: not in %s; check the fingerprint, then add it with "+
			"`ssh-keyscan -p %s %s >> ~/.ssh/known_hosts` (or connect once with OpenSSH), or rerun with -ssh-accept-new to record new hosts",
			e.Host, e.Addr, e.KeyType, e.Fingerprint, strings.Join(e.Files, ", "), port, host)
	case ErrHostKeyMismatch:
		var where []string
		for _, k := range e.Known {
			where = append(where, fmt.Sprintf("%s:%d (%s)", k.Filename, k.Line, k.Key.Type()))
		}
		return fmt.Sprintf("ssh %s (%s): HOST KEY MISMATCH, possible man-in-the-middle attack: the host offered %s %s "+
			"but known_hosts has a different key at %s; if the host was legitimately reinstalled, remove the old entry "+
			"with `ssh-keygen -R %s` and verify the new key", e.Host, e.Addr, e.KeyType, e.Fingerprint,
			strings.Join(where, ", "), shellQuote(knownhosts.Normalize(e.Addr)))
	}
	return fmt.Sprintf("ssh %s (%s): %v: %s %s", e.Host, e.Addr, e.Err, e.KeyType, e.Fingerprint)
}

// hostKeyChecker verifies one handshake's host key; err keeps the typed
// error, since the handshake wraps it.
type hostKeyChecker struct {
	b   *SSH
	t   *sshTarget
	db  ssh.HostKeyCallback
	mu  sync.Mutex
	err error
}

func (h *hostKeyChecker) callback(hostname string, remote net.Addr, key ssh.PublicKey) error {
	err := h.check(hostname, remote, key)
	if err != nil {
		h.mu.Lock()
		h.err = err
		h.mu.Unlock()
	}
	return err
}

// failure is the callback's error. The handshake runs the callback on its
// own goroutine, which can still be inside it when NewClientConn has
// already returned (the connection closed under the handshake).
func (h *hostKeyChecker) failure() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *hostKeyChecker) check(hostname string, remote net.Addr, key ssh.PublicKey) error {
	err := h.db(hostname, remote, key)
	if err == nil {
		return nil
	}
	he := &HostKeyError{Host: h.t.alias, Addr: h.t.addr, KeyType: key.Type(),
		Fingerprint: ssh.FingerprintSHA256(key), Files: h.t.knownHosts}
	var ke *knownhosts.KeyError
	var re *knownhosts.RevokedError
	switch {
	case errors.As(err, &ke) && len(ke.Want) == 0:
		if !h.t.acceptNew {
			he.Err = ErrUnknownHostKey
			return he
		}
		if h.t.appendTo == "" {
			h.b.cfg.Log.Warn("accepted host key without recording it (UserKnownHostsFile /dev/null)",
				"host", h.t.alias, "key", key.Type()+" "+he.Fingerprint)
			return nil
		}
		if err := h.b.appendKnownHost(h.t.appendTo, hostname, key); err != nil {
			return fmt.Errorf("ssh %s: record new host key in %s: %w", h.t.alias, h.t.appendTo, err)
		}
		h.b.cfg.Log.Warn("added new host key to known_hosts", "host", h.t.alias, "addr", h.t.addr,
			"key", key.Type()+" "+he.Fingerprint, "file", h.t.appendTo)
		return nil
	case errors.As(err, &ke):
		he.Err, he.Known = ErrHostKeyMismatch, ke.Want
		return he
	case errors.As(err, &re):
		he.Err = ErrHostKeyRevoked
		return he
	}
	return fmt.Errorf("ssh %s: host key check: %w", h.t.alias, err)
}

func (b *SSH) appendKnownHost(file, hostname string, key ssh.PublicKey) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// hostKeyCheck loads the known_hosts files and returns the checker and the
// host key algorithms to offer: those of the keys known for this host
// first, so a host known by its ed25519 key is asked for that key, not for
// whichever type the server prefers (which knownhosts would call a
// mismatch).
func (b *SSH) hostKeyCheck(t *sshTarget, remote net.Addr) (*hostKeyChecker, []string, error) {
	var files []string
	for _, f := range t.knownHosts {
		if _, err := os.Stat(f); err == nil {
			files = append(files, f)
		}
	}
	b.mu.Lock() // not while accept-new appends
	db, err := knownhosts.New(files...)
	b.mu.Unlock()
	if err != nil {
		return nil, nil, fmt.Errorf("ssh %s: known_hosts: %w", t.alias, err)
	}
	var algos []string
	var ke *knownhosts.KeyError
	if probeKey == nil {
		return &hostKeyChecker{b: b, t: t, db: db}, nil, nil
	}
	if err := db(t.addr, remote, probeKey); errors.As(err, &ke) && len(ke.Want) > 0 {
		seen := map[string]bool{}
		add := func(a string) {
			if !seen[a] {
				seen[a] = true
				algos = append(algos, a)
			}
		}
		for _, k := range ke.Want {
			if k.Key.Type() == ssh.KeyAlgoRSA {
				add(ssh.KeyAlgoRSASHA512)
				add(ssh.KeyAlgoRSASHA256)
			}
			add(k.Key.Type())
		}
		// Then everything else: a host that no longer has the known type
		// shows its new key and gets a mismatch error, not "no common
		// algorithm".
		for _, a := range ssh.SupportedAlgorithms().HostKeys {
			add(a)
		}
	}
	return &hostKeyChecker{b: b, t: t, db: db}, algos, nil
}

// probeKey is a key no host has: checking it lists the known keys.
var probeKey = func() ssh.PublicKey {
	// A fixed, valid ed25519 public key (32 bytes of 0x01).
	k, err := ssh.ParsePublicKey(append([]byte{0, 0, 0, 11}, append([]byte("ssh-ed25519"),
		append([]byte{0, 0, 0, 32}, make32(1)...)...)...))
	if err != nil {
		return nil
	}
	return k
}()

func make32(v byte) []byte {
	b := make([]byte, 32)
	for i := range b {
		b[i] = v
	}
	return b
}
