#!/usr/bin/env bash
# Builds the serin-operator or serin-loadtester OCI image with Debian's buildah, offline: FROM scratch
# (artifacts/images/<name>.Containerfile), with the binary and a root filesystem assembled from the
# Debian packages libc6, libgcc-s1 and ca-certificates, as distroless images are. Tags
# localhost/<name>:<version> in buildah's storage and writes target/images/<name>-<version>.oci.tar.
#
#   scripts/build-image.sh serin-operator [--profile release|debug]
#   scripts/build-image.sh serin-operator --context DIR   only assemble the build context in DIR,
#       for another builder: docker build -f artifacts/images/serin-operator.Containerfile DIR
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
name=${1:-}
profile=release
context_only=""
case ${2:-} in
  --profile) profile=${3:?--profile needs release or debug} ;;
  --context) context_only=${3:?--context needs a directory} ;;
  "") ;;
  *) echo "unknown option $2" >&2; exit 2 ;;
esac
case $name in
  serin-operator | serin-loadtester) ;;
  *)
    echo "usage: $0 serin-operator|serin-loadtester [--profile release|debug]" >&2
    exit 2
    ;;
esac
case $profile in release | debug) ;; *) echo "--profile must be release or debug" >&2; exit 2 ;; esac

if [ -z "$context_only" ] && ! command -v buildah >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah
  else
    echo "building images needs Debian's buildah: sudo apt-get install buildah" >&2
    exit 1
  fi
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
cargo=${CARGO:-cargo}
if [ "$profile" = release ]; then
  (cd "$root" && "$cargo" build -q --release -p "$name")
else
  # The whole workspace's binaries: a package alone resolves its dependencies' features on its own
  # and would recompile much of what `cargo test --workspace` and the e2e suite build.
  (cd "$root" && "$cargo" build -q --workspace --bins)
fi
binary=${CARGO_TARGET_DIR:-$root/target}/$profile/$name

if [ -n "$context_only" ]; then
  mkdir -p "$context_only"
  context=$(cd "$context_only" && pwd)
else
  context=$(mktemp -d)
  trap 'rm -rf "$context"' EXIT
fi
rootfs=$context/rootfs
mkdir -p "$rootfs"
# As root, apt hands downloads to its _apt user, which cannot write into a private directory.
(cd "$context" && apt-get download -qq -o APT::Sandbox::User="$(id -un)" libc6 libgcc-s1 ca-certificates >/dev/null)
for package in "$context"/*.deb; do
  dpkg-deb -x "$package" "$rootfs"
done
# What a distroless base keeps: the libraries and the CA bundle. No shell, no tools, no docs.
rm -rf "$rootfs"/usr/share/doc "$rootfs"/usr/share/man "$rootfs"/usr/share/lintian \
  "$rootfs"/usr/share/locale "$rootfs"/usr/sbin "$rootfs"/usr/bin "$rootfs"/sbin "$rootfs"/bin \
  "$rootfs"/usr/lib/x86_64-linux-gnu/gconv "$rootfs"/etc/ca-certificates.conf
mkdir -p "$rootfs"/etc/ssl/certs "$rootfs"/tmp "$rootfs"/home/nonroot "$rootfs"/usr/local/bin
# update-ca-certificates (a shell script, not run here) would write the same bundle.
cat "$rootfs"/usr/share/ca-certificates/mozilla/*.crt >"$rootfs"/etc/ssl/certs/ca-certificates.crt
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
  >"$rootfs"/etc/passwd
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs"/etc/group
chmod 1777 "$rootfs"/tmp
chown 65532:65532 "$rootfs"/home/nonroot 2>/dev/null || true
install -m 0755 "$binary" "$rootfs/usr/local/bin/$name"
strip --strip-debug "$rootfs/usr/local/bin/$name" 2>/dev/null || true
if [ "$name" = serin-operator ]; then
  # Flagger's chart starts `./flagger` in the working directory and probes with `wget --spider`:
  # the operator binary answers to both names (a Flagger drop-in; see docs/migrating.md).
  mkdir -p "$rootfs"/usr/bin
  ln -s /usr/local/bin/serin-operator "$rootfs"/home/nonroot/flagger
  ln -s /usr/local/bin/serin-operator "$rootfs"/usr/bin/wget
  # The chart's in-cluster dashboard (dashboard.enabled) runs the same binary under this name.
  ln -s /usr/local/bin/serin-operator "$rootfs"/usr/local/bin/serin-dashboard
fi
rm -f "$context"/*.deb
if [ -n "$context_only" ]; then
  echo "build context in $context: docker build -f $root/artifacts/images/$name.Containerfile --build-arg VERSION=$version $context"
  exit 0
fi

export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
tag=localhost/$name:$version
buildah bud --quiet --format oci --build-arg "VERSION=$version" \
  -f "$root/artifacts/images/$name.Containerfile" -t "$tag" "$context" >/dev/null
mkdir -p "$root/target/images"
archive=$root/target/images/$name-$version.oci.tar
rm -f "$archive"
buildah push --quiet "$tag" "oci-archive:$archive:$tag" >/dev/null
echo "$tag -> $archive ($(du -h "$archive" | cut -f1))"
