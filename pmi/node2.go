package pmi

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
)

// serve2 speaks PMI-2 framing after a PMI-1 init that asked for version 2.
func (s *session) serve2(ctx context.Context, r *bufio.Reader) error {
	finalized := false
	for {
		body, err := readFrame2(r)
		if err != nil {
			return s.readError(ctx, err, !finalized)
		}
		s.n.trace(s.rank, "C", body)
		c, err := ParseFrame2(body)
		if err != nil {
			s.reply(formatFrame2("error", "rc", "-1", "errmsg", "malformed command"))
			return &RankError{s.rank, err}
		}
		done, err := s.handle2(ctx, c)
		if err != nil {
			return &RankError{s.rank, err}
		}
		finalized = finalized || done
	}
}

func (s *session) handle2(ctx context.Context, c Command2) (finalized bool, err error) {
	n := s.n
	cfg := &n.cfg
	// Threaded clients tag requests; the reply must carry the same tag.
	reply := func(name string, kv ...string) error {
		if t, ok := c.Args["thrid"]; ok {
			kv = append([]string{"thrid", t}, kv...)
		}
		return s.reply(formatFrame2(name, kv...))
	}
	if s.rank < 0 && c.Name != "fullinit" {
		reply(c.Name+"-response", "rc", "-1", "errmsg", "fullinit first")
		return false, fmt.Errorf("%w: %q before fullinit in PMI_PORT mode", ErrRefused, c.Body)
	}
	switch c.Name {
	case "fullinit":
		if s.rank < 0 {
			// PMI_PORT mode: MPICH's client names itself with pmirank
			// (from PMI_ID), Slurm's libpmi2 with srcid.
			idStr, ok := c.Args["pmirank"]
			if !ok {
				idStr = c.Args["srcid"]
			}
			id, err := strconv.Atoi(idStr)
			if err != nil || !n.isLocal[id] {
				reply("fullinit-response", "rc", "-1", "errmsg", "unknown rank")
				return false, fmt.Errorf("%w: fullinit with unknown pmirank/srcid in %q", ErrProtocol, c.Body)
			}
			if err := n.claim(id); err != nil {
				reply("fullinit-response", "rc", "-1", "errmsg", "rank already claimed")
				return false, err
			}
			s.rank = id
		}
		n.mark(n.spoke, s.rank)
		return false, reply("fullinit-response", "pmi-version", "2", "pmi-subversion", "0",
			"rank", strconv.Itoa(s.rank), "size", strconv.Itoa(cfg.Size), "appnum", strconv.Itoa(cfg.AppNum(s.rank)),
			"debugged", "FALSE", "pmiverbose", "FALSE", "rc", "0")
	case "job-getid":
		return false, reply("job-getid-response", "jobid", cfg.KVSName, "rc", "0")
	case "kvs-put":
		key, val := c.Args["key"], c.Args["value"]
		if key == "" || len(key) > MaxKey || len(val) > MaxValue {
			reply("kvs-put-response", "rc", "-1", "errmsg", "key or value too long")
			return false, fmt.Errorf("%w: key %q or its value exceeds the limits (%d/%d)", ErrProtocol, key, MaxKey, MaxValue)
		}
		n.mu.Lock()
		n.kvs[key] = val
		n.pending = append(n.pending, KV{key, val})
		n.mu.Unlock()
		return false, reply("kvs-put-response", "rc", "0")
	case "kvs-get":
		if v, ok := n.get(c.Args["key"]); ok {
			return false, reply("kvs-get-response", "found", "TRUE", "value", v, "rc", "0")
		}
		return false, reply("kvs-get-response", "found", "FALSE", "rc", "0")
	case "kvs-fence":
		if err := n.barrier(ctx, s.rank); err != nil {
			return false, err
		}
		return false, reply("kvs-fence-response", "rc", "0")
	case "info-getjobattr":
		if c.Args["key"] == "PMI_process_mapping" && cfg.ProcessMapping != "" {
			return false, reply("info-getjobattr-response", "found", "TRUE", "value", cfg.ProcessMapping, "rc", "0")
		}
		if c.Args["key"] == "PMI_dead_processes" {
			v, _ := n.get("PMI_dead_processes")
			return false, reply("info-getjobattr-response", "found", "TRUE", "value", v, "rc", "0")
		}
		return false, reply("info-getjobattr-response", "found", "FALSE", "rc", "0")
	case "info-putnodeattr":
		n.putNodeAttr(c.Args["key"], c.Args["value"])
		return false, reply("info-putnodeattr-response", "rc", "0")
	case "info-getnodeattr":
		v, ok, err := n.getNodeAttr(ctx, c.Args["key"], c.Args["wait"] == "TRUE")
		if err != nil {
			return false, err
		}
		if !ok {
			return false, reply("info-getnodeattr-response", "found", "FALSE", "rc", "0")
		}
		return false, reply("info-getnodeattr-response", "found", "TRUE", "value", v, "rc", "0")
	case "finalize":
		n.mark(n.done, s.rank)
		return true, reply("finalize-response", "rc", "0")
	case "abort":
		cfg.Uplink.Abort(s.rank, 1, c.Args["msg"])
		<-ctx.Done()
		return false, ErrAborted
	case "name-publish":
		if err := cfg.Uplink.Publish(ctx, c.Args["name"], c.Args["port"]); err != nil {
			return false, reply("name-publish-response", "rc", "1", "errmsg", err.Error())
		}
		return false, reply("name-publish-response", "rc", "0")
	case "name-unpublish":
		if err := cfg.Uplink.Unpublish(ctx, c.Args["name"]); err != nil {
			return false, reply("name-unpublish-response", "rc", "1", "errmsg", err.Error())
		}
		return false, reply("name-unpublish-response", "rc", "0")
	case "name-lookup":
		port, err := cfg.Uplink.Lookup(ctx, c.Args["name"])
		if err != nil {
			return false, reply("name-lookup-response", "found", "FALSE", "rc", "1", "errmsg", err.Error())
		}
		return false, reply("name-lookup-response", "port", port, "found", "TRUE", "rc", "0")
	case "spawn":
		return false, reply("spawn-response", "rc", "-1", "errmsg", "spawn is not supported by gompi")
	}
	reply(c.Name+"-response", "rc", "-1", "errmsg", "unknown command")
	return false, fmt.Errorf("%w: unknown PMI-2 command %q", ErrProtocol, c.Body)
}

func (n *Node) putNodeAttr(key, val string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodeAttrs[key] = val
	close(n.attrChanged)
	n.attrChanged = make(chan struct{})
}

// getNodeAttr returns a node attribute; with wait it blocks until some local
// rank puts it (MPICH's node-local broadcast).
func (n *Node) getNodeAttr(ctx context.Context, key string, wait bool) (string, bool, error) {
	for {
		n.mu.Lock()
		v, ok := n.nodeAttrs[key]
		changed := n.attrChanged
		n.mu.Unlock()
		if ok || !wait {
			return v, ok, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return "", false, ctx.Err()
		}
	}
}
