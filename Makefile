# gompi build, test and benchmark entry points. See README.md.
GO          ?= go
BIN         := bin
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 10s
NP          ?= 4

.PHONY: all build setup test unit fuzz demo bench bench-ssh bench-io lint fmt clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/... ./examples/...

# Installs the system packages the end-to-end tests use (MPICH, OpenSSH, iproute2).
setup:
	bash test/setup.sh

# Everything CI runs: vet, unit and end-to-end tests under the race detector, then
# a short bounded run of every fuzz target.
test: setup build
	$(GO) vet ./...
	$(GO) test -race -timeout 30m -count=1 ./...
	# The runtime again with same-host peers on TCP, and with CMA off.
	GOMPI_SHM=0 $(GO) test -race -count=1 ./runtime/
	GOMPI_CMA=0 $(GO) test -race -count=1 ./runtime/
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

bench: setup build
	$(GO) run ./test/bench -gompiexec ./$(BIN)/gompiexec
	$(GO) test -run "^$$" -bench Fence4096 -benchtime 20x ./pmi/
	$(GO) test -run "^$$" -bench . ./internal/shm/
	$(GO) run ./test/bench -gompiexec ./$(BIN)/gompiexec -gompi-bench ./$(BIN)/gompi-bench -osu -osu-svg bench-out/osu.svg

# Launch over SSH on a 3-host network-namespace cluster (test/cluster; root only).
bench-ssh: setup build
	$(GO) run ./test/bench -gompiexec ./$(BIN)/gompiexec -ssh

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
