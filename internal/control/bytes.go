package control

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"github.com/gompi/gompi/pmi"
)

// Unix arguments, environment strings, paths and PMI values are bytes, and
// Go strings hold them unchanged; JSON strings are Unicode, and
// encoding/json replaces bytes that are not UTF-8 with U+FFFD. So the
// fields that carry such bytes are written as a JSON string when they are
// valid UTF-8 (the usual case, readable in traces) and as {"b64":"..."}
// (standard base64 of the bytes) when they are not (docs/control.md).

// wstr is a string carried byte for byte.
type wstr string

type b64 struct {
	B64 string `json:"b64"`
}

func (s wstr) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(s)) {
		return json.Marshal(string(s))
	}
	return json.Marshal(b64{base64.StdEncoding.EncodeToString([]byte(s))})
}

func (s *wstr) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '{' {
		var o b64
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		raw, err := base64.StdEncoding.DecodeString(o.B64)
		if err != nil {
			return errors.New("control: bad base64 string")
		}
		*s = wstr(raw)
		return nil
	}
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = wstr(v)
	return nil
}

func toW(ss []string) []wstr {
	if ss == nil {
		return nil
	}
	out := make([]wstr, len(ss))
	for i, s := range ss {
		out[i] = wstr(s)
	}
	return out
}

func fromW(ws []wstr) []string {
	if ws == nil {
		return nil
	}
	out := make([]string, len(ws))
	for i, s := range ws {
		out[i] = string(s)
	}
	return out
}

// Each type below is marshalled as its plain self (so fields added later
// need nothing here) with the byte-carrying fields shadowed by wstr ones
// of the same JSON name: the shallower field wins in encoding/json.

type plainApp App

type wireApp struct {
	*plainApp
	Argv    []wstr `json:"argv"`
	Path    wstr   `json:"path,omitempty"`
	Env     []wstr `json:"env"`
	Wdir    wstr   `json:"wdir"`
	Inherit []wstr `json:"inherit,omitempty"`
}

func (a App) MarshalJSON() ([]byte, error) {
	p := plainApp(a)
	return json.Marshal(wireApp{&p, toW(a.Argv), wstr(a.Path), toW(a.Env), wstr(a.Wdir), toW(a.Inherit)})
}

func (a *App) UnmarshalJSON(b []byte) error {
	w := wireApp{plainApp: (*plainApp)(a)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	a.Argv, a.Path, a.Env, a.Wdir, a.Inherit = fromW(w.Argv), string(w.Path), fromW(w.Env), string(w.Wdir), fromW(w.Inherit)
	return nil
}

type plainJob Job

type wireJob struct {
	*plainJob
	Env       []wstr `json:"env"`
	ProxyPath wstr   `json:"proxy_path,omitempty"`
}

func (j Job) MarshalJSON() ([]byte, error) {
	p := plainJob(j)
	return json.Marshal(wireJob{&p, toW(j.Env), wstr(j.ProxyPath)})
}

func (j *Job) UnmarshalJSON(b []byte) error {
	w := wireJob{plainJob: (*plainJob)(j)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	j.Env, j.ProxyPath = fromW(w.Env), string(w.ProxyPath)
	return nil
}

type wireKV struct {
	Key   wstr `json:"Key"`
	Value wstr `json:"Value"`
}

type plainMsg Msg

type wireMsg struct {
	*plainMsg
	KVS     []wireKV `json:"kvs,omitempty"`
	Service wstr     `json:"service,omitempty"`
	Port    wstr     `json:"port,omitempty"`
}

func (m Msg) MarshalJSON() ([]byte, error) {
	p := plainMsg(m)
	w := wireMsg{plainMsg: &p, Service: wstr(m.Service), Port: wstr(m.Port)}
	if m.KVS != nil {
		w.KVS = make([]wireKV, len(m.KVS))
		for i, kv := range m.KVS {
			w.KVS[i] = wireKV{wstr(kv.Key), wstr(kv.Value)}
		}
	}
	return json.Marshal(w)
}

func (m *Msg) UnmarshalJSON(b []byte) error {
	w := wireMsg{plainMsg: (*plainMsg)(m)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	m.Service, m.Port = string(w.Service), string(w.Port)
	m.KVS = nil
	if w.KVS != nil {
		m.KVS = make([]pmi.KV, len(w.KVS))
		for i, kv := range w.KVS {
			m.KVS[i] = pmi.KV{Key: string(kv.Key), Value: string(kv.Value)}
		}
	}
	return nil
}
