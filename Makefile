# The README's two commands: `make test` and `make demo`. Both set up what they need:
# Node 24 inside the project (scripts/ensure-node.sh) and the npm dependencies.
SHELL := /bin/bash
export PATH := $(CURDIR)/.tools/node/bin:$(CURDIR)/.tools/bin:$(CURDIR)/node_modules/.bin:$(PATH)
NODE := $(CURDIR)/.tools/node/bin/node
STAMP := node_modules/.installed

.PHONY: test demo dev bench setup test-peers typecheck lint imports copies format unit clean docs validators sidecar-snapshot
setup: $(STAMP)

.tools/node/bin/node:
	@bash scripts/ensure-node.sh

# `npm install` rather than `npm ci`: the lock file keeps the exact versions, but the registry
# mirror serves only this platform's optional packages (e.g. biome's other-OS binaries), which
# `npm ci` insists on finding in the lock.
$(STAMP): package-lock.json package.json .tools/node/bin/node
	@npm install --no-audit --no-fund --loglevel=error
	@touch $(STAMP)

# Every peer the suite runs against (redis-server, PostgreSQL, promtool, gRPC C-core, Envoy,
# Helm, the cert-manager/prometheus-operator/Istio CRD schemas, debootstrap + buildah and the local
# image base): installed when missing, and a peer that cannot be installed fails the run by name.
test-peers:
	@bash scripts/ensure-test-peers.sh

# docs/configuration.md is generated from the settings definitions (test/docs/configuration.test.ts
# fails when the committed page differs).
docs: setup
	@node scripts/gen-configuration-doc.ts

# src/core/generated-validators/ is generated from the schemas of compileSchema (ajv standalone
# code, loaded instead of compiled at start; test/core/generated-validators.test.ts fails when stale).
validators: setup
	@node scripts/gen-schema-validators.ts

# build/sidecar-snapshot/: the sidecar's V8 start-up snapshot (decision 2799). `authority sidecar`
# starts from it while its stamp matches this Node and the sources, from the sources otherwise.
sidecar-snapshot: setup
	@node scripts/build-sidecar-snapshot.ts

typecheck: setup
	@tsc --noEmit -p .

lint: setup
	@biome check .

# The layers of src/ and no import cycles (.dependency-cruiser.cjs;
# docs/decisions/1701-layers-and-import-rules.md).
imports: setup
	@depcruise src

# Copy-paste detector over src/; fails above the threshold in .jscpd.json
# (docs/decisions/1702-copy-paste-threshold.md).
copies: setup
	@jscpd

format: setup
	@biome check --write .

# The runner's whole output is kept and scanned for the suite's planted canary secrets:
# a secret, token or plaintext in any log line or message fails the build.
# exit-when-done.ts ends a test file's process that its tests left with open handles (a Redis
# client reconnecting forever once hung CI for 90 minutes); the outer timeout turns any other
# hang into a red run well inside CI's budget.
unit: setup test-peers
	@set -o pipefail; timeout -k 10 1080 node --test --test-concurrency=2 --test-timeout=180000 \
		--import ./test/helpers/exit-when-done.ts "test/**/*.test.ts" 2>&1 | tee .authority-test.log
	@node scripts/scan-canaries.ts .authority-test.log

test: setup
	@echo "node $$(node --version)"
	@$(MAKE) --no-print-directory typecheck lint imports copies
	@$(MAKE) --no-print-directory unit

demo: setup
	@node bin/authority.ts demo

dev: setup
	@node bin/authority.ts dev

# `make bench` writes docs/benchmarks.md; `make bench QUICK=1` is the smoke form (writes nothing);
# `make bench ONLY=envoy,sidecar` a subset (writes nothing); `make bench ONLY=envoy UPDATE=1`
# measures those again and replaces only their sections of docs/benchmarks.md.
bench: setup test-peers
	@AUTHORITY_PEERS_ONLY=opa bash scripts/ensure-test-peers.sh
	@AUTHORITY_LOG_LEVEL=silent node bench/run.ts $(if $(QUICK),--quick)

clean:
	rm -rf .tools node_modules .authority build
