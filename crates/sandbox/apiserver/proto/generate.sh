#!/usr/bin/env bash
# Rebuilds kubernetes.fds, the descriptor set the sandbox decodes protobuf request bodies with.
# Usage: generate.sh <protos-dir>, where <protos-dir> holds Kubernetes' generated.proto files laid out
# as kube-rs/k8s-pb's k8s-pb-codegen/protos (api/<group>/<version>/, apimachinery/, ...).
# Needs protoc (Debian: protobuf-compiler). Only stable versions are kept; no comments (source info).
set -euo pipefail
protos=${1:?usage: generate.sh <protos-dir>}
out=$(cd "$(dirname "$0")" && pwd)/kubernetes.fds
cd "$protos"
mapfile -t files < <(find api apimachinery apiextensions-apiserver -name generated.proto \
  | grep -E '/v[0-9]+/generated.proto$|^apimachinery/' | grep -v testapigroup | sort)
protoc --include_imports --descriptor_set_out="$out" -I. "${files[@]}" 2>/dev/null
echo "wrote $out from ${#files[@]} files"
