# kiln: the two commands are `make image` and `make test`. Both install what
# they need (Debian packages, Go modules) and cache slow inputs under
# $(KILN_CACHE), keyed by content.

SHELL       := /bin/bash
GO          ?= go
KILN_CACHE  ?= $(HOME)/.cache/kiln
OUT         ?= out
SPEC        ?=
VERSION     ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -buildid= -X main.version=$(VERSION)
export KILN_CACHE

.PHONY: all deps kiln image upgrade-images upgrade-test test unit integration qemu-test cluster-test rebuild-test bench soak fuzz components clean

all: image

# GOMAXPROCS sizes the go command's download queue (2 here); fetching modules
# is bound by the proxy's latency, so 16 at once is ~3x faster cold.
deps:
	@bash scripts/host-deps.sh
	@GOMAXPROCS=16 $(GO) mod download

# The kiln binary is static: the same file runs on the build host and is
# baked into the image as the node agent.
kiln: bin/kiln
bin/kiln: FORCE
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/kiln ./cmd/kiln

# Build the default image (the spec embedded from images/node.yaml unless
# SPEC=path is given) into $(OUT)/.
image: deps bin/kiln
	./bin/kiln build $(if $(SPEC),-f $(SPEC)) -o $(OUT)

# Unit tests (the QEMU scenarios skip themselves without KILN_QEMU=1),
# the host integration tests, then the QEMU boot tests against the image
# in $(OUT)/, then a second build compared byte for byte with the first.
test: unit integration qemu-test rebuild-test

unit: deps
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...

# Host integration tests that need the component binaries make image built:
# the add-ons applied to a real etcd + kube-apiserver started on the host,
# a kubelet client certificate renewed through a real controller-manager,
# the quorum check of the ordered control-plane start on a real etcd,
# a containerd seed made, planted and read by the image's real containerd,
# snapshots of a real etcd taken, verified and pruned, and a snapshot
# restored and started on a real etcd and apiserver.
integration: image
	KILN_INTEGRATION=1 $(GO) test -count=1 -timeout 10m -v -run 'TestAddOnsApplyToARealAPIServer|TestRBACDefaultsHookIsARealAPIServerCheck|TestKubeletClientCertRotatesOnARealControlPlane|TestServingCertApprovalOnARealAPIServer|TestEtcdQuorumOnARealEtcd|TestRemovedNodeIsDeniedOnARealAPIServer|TestRestoreOnARealEtcd' ./firstboot/role/
	KILN_INTEGRATION=1 $(GO) test -count=1 -timeout 5m -v -run 'TestSeedOnARealContainerd' ./builder/imageseed/
	KILN_INTEGRATION=1 $(GO) test -count=1 -timeout 5m -v -run 'TestSnapshotsOfARealEtcd' ./node/etcdsnapshot/

# The three-VM cluster scenario (genesis m1, master m2, worker w1, pods
# across nodes, a whole-cluster power cut) and the genesis join run first,
# alone; then
# the one-vCPU boot scenarios two at a time (qemu-tests' boot slots;
# -parallel 4 is for the cluster scenario's checks, which wait on pods,
# not on CPU). make cluster-test runs the cluster scenarios alone: the
# three-VM cluster by default, CLUSTER_TESTS=TestTwoNodeClusterSurvivesPowerCut
# for one master and a worker, TestGenesisBootsAndSurvivesPowerCut for
# genesis alone, TestThreeMastersSurvivePowerCut for three masters.
# A failed QEMU run ends with each failed test's failure message (a
# scenario's cleanup reports and the tests after it bury it in the log).
RECAP = rc=$${PIPESTATUS[0]}; [ $$rc = 0 ] || $(GO) run ./qemu-tests/cmd/failure-recap
qemu-test: image
	KILN_QEMU=1 KILN_OUT=$(abspath $(OUT)) KILN_BIN=$(abspath bin/kiln) $(GO) test -count=1 -timeout 80m -parallel 4 -v ./qemu-tests/ 2>&1 | tee $(OUT)/qemu-test.log; $(RECAP) $(OUT)/qemu-test.log; exit $$rc

CLUSTER_TESTS ?= TestClusterJoinsAndSurvivesPowerCut
cluster-test: image
	KILN_QEMU=1 KILN_CLUSTER=1 KILN_OUT=$(abspath $(OUT)) KILN_BIN=$(abspath bin/kiln) $(GO) test -count=1 -timeout 100m -parallel 4 -v -run '^($(CLUSTER_TESTS))$$' ./qemu-tests/ 2>&1 | tee $(OUT)/cluster-test.log; $(RECAP) $(OUT)/cluster-test.log; exit $$rc

# Two more builds of the default image for the upgrade scenario
# (qemu-tests/upgrade_test.go), beside $(OUT): v2 differs from $(OUT) in
# its kiln binary only (another version string), v3 is a third kiln whose
# trying boots fail their health gate on purpose. Warm, each is a rebuild
# of the kiln layer and the artifacts.
upgrade-images: image
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -buildid= -X main.version=$(VERSION)-upgrade-v2' -o bin/kiln-upgrade-v2 ./cmd/kiln
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w -buildid= -X main.version=$(VERSION)-upgrade-v3' -o bin/kiln-upgrade-v3 ./cmd/kiln
	./bin/kiln-upgrade-v2 build $(if $(SPEC),-f $(SPEC)) -o $(OUT)-upgrade-v2
	./bin/kiln-upgrade-v3 build $(if $(SPEC),-f $(SPEC)) --test-fail-health-gate -o $(OUT)-upgrade-v3

# The upgrade scenario (one genesis node on a raw disk rolled forward onto
# v2, back from v3 twice: about an hour under TCG), outside CI's budget:
# make soak runs it first.
upgrade-test: upgrade-images
	KILN_QEMU=1 KILN_UPGRADE=1 KILN_OUT=$(abspath $(OUT)) KILN_BIN=$(abspath bin/kiln) $(GO) test -count=1 -timeout 90m -v -run '^TestUpgradeRollsForwardAndBack$$' ./qemu-tests/ 2>&1 | tee $(OUT)/upgrade-test.log; $(RECAP) $(OUT)/upgrade-test.log; exit $$rc

rebuild-test: image
	KILN_REBUILD=1 KILN_OUT=$(abspath $(OUT)) KILN_BIN=$(abspath bin/kiln) $(GO) test -count=1 -timeout 20m -v -run TestRebuildIsByteIdentical ./builder/

# Build the pinned Kubernetes components, etcd, CoreDNS and containerd from
# the Go module proxy into $(KILN_CACHE)/gobuild and check each --version
# (cold: about 25 min on 2 cores). make image builds the same pins itself;
# this target only warms the cache and proves the builds.
components: deps
	KILN_COMPONENTS=1 $(GO) test -count=1 -timeout 55m -v -run 'TestBuildComponents|TestBuildCoreDNS' ./builder/gobuild/

bench: deps bin/kiln
	bash scripts/bench.sh

# Not in CI (too long for its budget): beside a nice -n 19 CPU hog, the
# three-master lifecycle (m3 lost and removed, the master role moved from
# m2 to a re-imaged w1, m3 and the genesis m1 re-imaged) and then
# SOAK_CUTS (default 5) whole-cluster power cuts in a row, and a
# one-master cluster restored from an etcd snapshot; SOAK_TESTS
# picks other scenarios, SOAK_CORES holds the run to fewer cores (a slower
# host), SOAK_HOST=slow takes make test's slow-host path (scripts/soak.sh).
# It runs make fuzz and make upgrade-test first.
soak: image fuzz upgrade-test
	bash scripts/soak.sh

# The fuzz targets of the parsers that take untrusted bytes (a config,
# its data: URLs, a TFTP server's packets, the kernel command line, a
# state disk's record, the site file), FUZZ_TIME each (default 60s).
fuzz: deps
	bash scripts/fuzz.sh

clean:
	rm -rf bin $(OUT)

FORCE:
