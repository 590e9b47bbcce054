# gompi build, test and benchmark entry points. See README.md.
GO          ?= go
BIN         := bin
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 10s
NP          ?= 4
PREFIX      ?= /usr/local
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT      ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The commands on a job's start-up path, linked statically (see build).
STATIC      := ./cmd/gompiexec ./cmd/gompi-proxy
# Every other command.
CMDS        := $(filter-out $(STATIC),$(patsubst %/,./%,$(dir $(wildcard cmd/*/main.go))))
LDFLAGS     := -X github.com/gompi/gompi/internal/buildinfo.version=$(VERSION) -X github.com/gompi/gompi/internal/buildinfo.commit=$(COMMIT)

.PHONY: install uninstall bench-slurm bench-ckpt bench-io
.PHONY: all build setup test unit fuzz demo bench bench-ssh lint fmt clean

all: build

# gompiexec and gompi-proxy are linked statically (no cgo: Go's own resolver and user
# lookup): a proxy is started per host and job, and a guard per job, and gompiexec's
# start is on the way to srun's, so the dynamic loader's start-up (glibc's CPU feature
# probing costs most under virtualisation) is paid on a job's critical path
# (docs/control.md, "Start-up costs").
build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ $(CMDS) ./examples/...
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ $(STATIC)

# Installs every command into $(DESTDIR)$(PREFIX)/bin, their man pages (written by
# each command's --gen-man) into share/man/man1, and gompiexec's shell completions
# where bash-completion, zsh and fish look for them.
install:
	@rm -rf $(BIN)/install && mkdir -p $(BIN)/install
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/install/ $(CMDS)
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/install/ $(STATIC)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	  $(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 755 $(BIN)/install/* $(DESTDIR)$(PREFIX)/bin/
	for c in $(BIN)/install/*; do $$c --gen-man $(DESTDIR)$(PREFIX)/share/man/man1 || \
	  { echo "$$c: no man page (every command must handle --gen-man, see internal/manpage)" >&2; exit 1; }; done
	$(BIN)/install/gompiexec completion bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/gompiexec
	$(BIN)/install/gompiexec completion zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_gompiexec
	$(BIN)/install/gompiexec completion fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/gompiexec.fish

uninstall:
	for c in $(notdir $(wildcard cmd/*)); do rm -f $(DESTDIR)$(PREFIX)/bin/$$c $(DESTDIR)$(PREFIX)/share/man/man1/$$c.1; done
	rm -f $(DESTDIR)$(PREFIX)/share/bash-completion/completions/gompiexec \
	  $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_gompiexec $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/gompiexec.fish

# Installs the system packages the end-to-end tests use (MPICH, OpenSSH, iproute2).
setup:
	bash test/setup.sh

# Everything CI runs: vet, unit and end-to-end tests under the race detector, then
# a short bounded run of every fuzz target.
test: setup build
	$(GO) vet ./...
	$(GO) test -race -timeout 30m -count=1 ./...
	# The runtime again with same-host peers on TCP, and with CMA off.
	GOMPI_SHM=0 $(GO) test -race -timeout 30m -count=1 ./runtime/
	GOMPI_CMA=0 $(GO) test -race -timeout 30m -count=1 ./runtime/
	$(MAKE) fuzz

unit:
	$(GO) test -race -short -count=1 ./...

fuzz:
	FUZZTIME=$(FUZZTIME) bash test/fuzz.sh

# Runs the demo job on this machine with the fork launcher (no SSH needed).
demo: build
	./$(BIN)/gompiexec -n $(NP) -l ./$(BIN)/hello
	./$(BIN)/gompiexec -n $(NP) ./$(BIN)/pi
	./$(BIN)/gompiexec -n $(NP) ./$(BIN)/tutorial
	./$(BIN)/gompiexec -n $(NP) ./$(BIN)/sharedarray -file $${TMPDIR:-/tmp}/gompi-demo-sharedarray.dat
	rm -rf $${TMPDIR:-/tmp}/gompi-demo-ckpt
	./$(BIN)/gompiexec -ckpoint-prefix $${TMPDIR:-/tmp}/gompi-demo-ckpt -max-restarts 1 -n $(NP) ./$(BIN)/heat -crash-at 60
	./$(BIN)/gompiexec ckpt list $${TMPDIR:-/tmp}/gompi-demo-ckpt

bench: setup build
	$(GO) run ./test/bench -gompiexec ./$(BIN)/gompiexec
	$(GO) test -run "^$$" -bench Fence4096 -benchtime 20x ./pmi/
	$(GO) test -run "^$$" -bench . ./internal/shm/
	$(GO) run ./test/bench -gompiexec ./$(BIN)/gompiexec -gompi-bench ./$(BIN)/gompi-bench -osu -osu-svg bench-out/osu.svg

# Launch over SSH on a 3-host network-namespace cluster (test/cluster; root only).
bench-ssh: setup build
	$(GO) run ./test/bench -gompiexec ./$(BIN)/gompiexec -ssh

# -n 24 /bin/true inside one allocation of a real Slurm on a 3-node namespace cluster:
# gompiexec -launcher slurm vs ssh, mpiexec.hydra -bootstrap slurm and bare srun (root only).
bench-slurm: setup build
	$(GO) run ./test/bench -gompiexec ./$(BIN)/gompiexec -slurm -reps $${REPS:-11}

# One checkpoint of 4 ranks x 256 MiB (package ckpt) against dd writing and syncing the
# same bytes, straight to the prefix and through a node-local cache (/dev/shm).
bench-ckpt: build
	$(GO) build -o $(BIN)/ckptbench-rank ./test/benchckpt/rank
	$(GO) run ./test/benchckpt -gompiexec ./$(BIN)/gompiexec -rank ./$(BIN)/ckptbench-rank -svg bench-out/ckpt.svg

# MPI-IO of runtime/mpiio against ROMIO and dd (IOR hard, contiguous, file per
# process; 2 and 4 ranks; about 5 minutes); table, docs/bench/io.{csv,svg,png}.
bench-io: setup build
	$(GO) run ./test/bench -io -gompiexec ./$(BIN)/gompiexec -gompi-iobench ./$(BIN)/gompi-iobench -io-csv docs/bench/io.csv -io-svg docs/bench/io.svg

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
