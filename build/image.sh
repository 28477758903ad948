#!/usr/bin/env bash
# Build the OCI images without a Docker engine or a registry (as root).
#
#   build/image.sh [--controller] [--trainer] [--import] [--check] [--wheel WHL]
#   build/image.sh --lock          # re-pin build/image/*.lock from setup.cfg
#
# What goes in is listed in build/image/ (image.conf, base-packages.txt, the
# .lock files); build/Dockerfile says the same for people with Docker. Three
# layers per image, each cached under $RING_IMAGES_CACHE (default
# ~/.cache/ring-images) and keyed by its inputs, so a second run takes seconds:
#   base  Debian bookworm minbase + python3 (mmdebstrap), the user 65532:65532
#   deps  a venv with the locked runtime dependencies (pip, bytecode compiled)
#   app   the controller: the product wheel (ring-controller, ring-launch) and
#         dist/ring-launch.pyz in /opt/ring-launch (built here); the trainer:
#         only build/examples/tensorflow/{train,make_cifar10}.py in /app, no
#         product (its pods get the launcher from the controller image's init
#         container, like any user's image)
# packed into an OCI layout (uncompressed layers) and written by skopeo as docker-archive
# tarballs dist/images/<name>-<version>.tar, tagged exactly as
# build/ring-controller.yaml names the image (ring-controller:0.1.0).
#
#   --controller   ring-controller:<version> (the default when neither is given)
#   --trainer      ring-trainer:<version>: TensorFlow CPU for the e2e tests
#   --import       ctr -n k8s.io images import into the node's containerd
#                  ($CONTAINERD_ADDRESS, default /run/containerd/containerd.sock)
#   --check        run the self-check even when the image came from the cache
#                  (it always runs after a build): runc runs the image as
#                  65532:65532 on a read-only root filesystem
#   --wheel WHL    use this product wheel instead of building one
#   --rebuild      ignore the cached layers and images of the chosen images
#
# Missing tools (mmdebstrap, umoci, skopeo, runc) are installed from Debian.
# CPU-heavy steps run under flock /tmp/gobuild.lock (shared with Go builds).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# shellcheck source=build/image/image.conf
source build/image/image.conf

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
    if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
version="$(sed -n 's/^version *= *//p' setup.cfg)"
cache="${RING_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ring-images}"
out="${RING_IMAGES_OUT:-$repo/dist/images}"
containerd="${CONTAINERD_ADDRESS:-/run/containerd/containerd.sock}"
tool=(python3 "$repo/build/image/imagetool.py")
# Bump when the recipe below changes in a way the inputs do not show.
recipe=1

started=$SECONDS
step() { printf '==> [%4ss] %s\n' "$((SECONDS - started))" "$*" >&2; }
die() { printf 'image.sh: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

want_controller=0 want_trainer=0 do_import=0 force_check=0 rebuild=0 lock=0 wheel=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --controller) want_controller=1 ;;
        --trainer) want_trainer=1 ;;
        --import) do_import=1 ;;
        --check) force_check=1 ;;
        --rebuild) rebuild=1 ;;
        --lock) lock=1 ;;
        --wheel) wheel="${2:?--wheel needs a path}"; shift ;;
        --wheel=*) wheel="${1#--wheel=}" ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
    shift
done
if [[ $want_controller -eq 0 && $want_trainer -eq 0 ]]; then want_controller=1; fi

# Heavy CPU work (minutes: the trainer's TensorFlow install and its gzip)
# waits for the machine's build lock, which Go builds take too. Light steps
# (mmdebstrap is mostly download and dpkg, the controller's venv takes
# seconds) run at once.
heavy() {
    if [[ "${light:-0}" -eq 1 ]]; then
        "$@"
        return
    fi
    local wait="${RING_IMAGES_LOCK_WAIT:-1800}"
    if flock -n /tmp/gobuild.lock true; then
        flock /tmp/gobuild.lock "$@"
        return
    fi
    step "waiting for /tmp/gobuild.lock (another build holds it; at most ${wait}s)"
    local rc=0
    flock -w "$wait" -E 75 /tmp/gobuild.lock "$@" || rc=$?
    if [[ $rc -eq 75 ]]; then
        # A holder that never lets go (a stuck job) must not stop the build.
        step "WARNING: /tmp/gobuild.lock still held after ${wait}s; running without it"
        "$@"
    elif [[ $rc -ne 0 ]]; then
        return "$rc"
    fi
}

sha() { sha256sum | cut -c1-16; }

# --- the product wheel ------------------------------------------------------
product_wheel() {
    if [[ -z "$wheel" ]]; then
        build/build.sh --wheel-only >&2
        wheel="$(ls "dist/ring_controller-$version-"*.whl)"
    fi
    [[ -f "$wheel" ]] || die "no wheel at $wheel"
    wheel="$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")"
}

if [[ $lock -eq 1 ]]; then
    product_wheel
    step "pinning the controller's runtime dependencies"
    "${tool[@]}" lock --pip-python "$python" build/image/"$CONTROLLER_LOCK" "$wheel"
    step "pinning the trainer's runtime dependencies ($TRAINER_REQUIRES)"
    # shellcheck disable=SC2086
    "${tool[@]}" lock --pip-python "$python" build/image/"$TRAINER_LOCK" "$wheel" $TRAINER_REQUIRES
    exit 0
fi

[[ $EUID -eq 0 ]] || die "needs root (mmdebstrap, chroot, runc); run as root"

# --- tools ----------------------------------------------------------------
need=()
for pair in mmdebstrap:mmdebstrap umoci:umoci skopeo:skopeo runc:runc; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair##*:}")
done
if [[ ${#need[@]} -gt 0 ]]; then
    step "installing ${need[*]} from Debian"
    export DEBIAN_FRONTEND=noninteractive
    apt_opts=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=600)
    apt-get install "${apt_opts[@]}" "${need[@]}" >&2 \
        || { apt-get update -q >&2 && apt-get install "${apt_opts[@]}" "${need[@]}" >&2; }
fi

mkdir -p "$cache" "$out"
# One build at a time per cache (the layers' .tmp directories, the layout's index).
exec 9>"$cache/.lock"
if ! flock -n 9; then
    step "waiting for another build/image.sh using $cache"
    flock 9
fi
# The product layer is keyed by what goes into the wheel (its packages and
# metadata), so a warm run needs no wheel build; one is built only when a
# layer has to be made. A wheel given with --wheel is keyed by its contents.
if [[ -n "$wheel" ]]; then
    product_wheel
    wheel_digest="whl:$("${tool[@]}" digest "$wheel" | cut -c1-16)"
else
    mapfile -t product_files < <(git ls-files -co --exclude-standard -- \
        setup.cfg pyproject.toml README.md ringcontroller agent model ranktable | sort)
    wheel_digest="src:$(python3 -c 'import hashlib, sys
h = hashlib.sha256()
for name in sys.argv[1:]:
    h.update(name.encode() + b"\0")
    try:
        h.update(hashlib.sha256(open(name, "rb").read()).digest())
    except FileNotFoundError:
        pass
print(h.hexdigest()[:16])' "${product_files[@]}")"
fi

# --- layer 1: base root filesystem (shared by both images) -----------------
packages="$(sed 's/#.*//' build/image/base-packages.txt | xargs)"
mirrors="$("${tool[@]}" mirrors "$SUITE")"
base_key="$(printf '%s\n' "recipe=$recipe" "$SUITE" "$VARIANT" "$packages" "$mirrors" \
    "$USER_ID:$GROUP_ID:$USER_NAME:$USER_HOME" | sha)"
base="$cache/base/$base_key"

build_base() {
    if [[ $rebuild -eq 0 && -f "$base/done" ]]; then
        step "base $base_key: cached ($SUITE $VARIANT + $packages)"
        return
    fi
    step "base $base_key: mmdebstrap $SUITE --variant=$VARIANT + $packages (about a minute; mirrors: $(echo "$mirrors" | awk '{print $2"/"$3}' | xargs))"
    rm -rf "$base" "$base.tmp"
    mkdir -p "$base.tmp"
    local -a mirror_args
    mapfile -t mirror_args <<<"$mirrors"
    mmdebstrap --variant="$VARIANT" --include="${packages// /,}" \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        "$SUITE" "$base.tmp/rootfs" "${mirror_args[@]}" 2>&1 \
        | grep --line-buffered -E '^(I|W|E): ' >&2
    local root="$base.tmp/rootfs"
    # The runtime user (numeric, so runAsNonRoot can verify it).
    echo "$USER_NAME:x:$USER_ID:$GROUP_ID:$USER_NAME:$USER_HOME:/usr/sbin/nologin" >>"$root/etc/passwd"
    echo "$USER_NAME:x:$GROUP_ID:" >>"$root/etc/group"
    echo "$USER_NAME:!:19000::::::" >>"$root/etc/shadow"
    install -d -m 0750 -o "$USER_ID" -g "$GROUP_ID" "$root$USER_HOME"
    # Build-time leftovers; the runtime provides /dev, resolv.conf and hostname.
    rm -rf "$root"/var/log/* "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* \
        "$root"/tmp/* "$root/etc/machine-id" "$root/etc/hostname"
    : >"$root/etc/resolv.conf"
    step "base $base_key: packing the layer"
    tar -C "$root" --numeric-owner --xattrs --sort=name --exclude='./dev/*' \
        --exclude='./proc/*' --exclude='./sys/*' -cf "$base.tmp/layer.tar" .
    touch "$base.tmp/done"
    mv "$base.tmp" "$base"
}

# --- layer 2: the venv with the locked dependencies ------------------------
# deps_layer NAME VENV LOCK -> sets deps_key and deps (its cache directory)
build_deps() {
    local name="$1" venv="$2" lockfile="build/image/$3"
    deps_key="$(printf '%s\n' "recipe=$recipe" "$base_key" "$venv" "$PIP" "prune=$prune" | cat - "$lockfile" | sha)"
    deps="$cache/deps/$name-$deps_key"
    if [[ $rebuild -eq 0 && -f "$deps/done" ]]; then
        step "$name deps $deps_key: cached ($(grep -c '==' "$lockfile") packages from $3)"
        return
    fi
    local wheels="$cache/wheels/$(cat "$lockfile" <(echo "$PIP") | sha)"
    if [[ ! -f "$wheels/done" ]]; then
        step "$name deps: downloading $(grep -c '==' "$lockfile") locked wheels and $PIP (pip cache: $cache/pip)"
        rm -rf "$wheels"
        mkdir -p "$wheels"
        "$python" -m pip download --disable-pip-version-check --progress-bar off \
            --cache-dir "$cache/pip" --dest "$wheels" --no-deps --only-binary=:all: \
            --python-version 3.11 "$PIP" >&2
        "$python" -m pip download --disable-pip-version-check --progress-bar off \
            --cache-dir "$cache/pip" --dest "$wheels" --no-deps --only-binary=:all: \
            --python-version 3.11 --require-hashes -r "$lockfile" >&2
        cp "$lockfile" "$wheels/requirements.lock"
        touch "$wheels/done"
    fi
    step "$name deps $deps_key: venv $venv from $(du -sh "$wheels" | cut -f1) of wheels (pip install --compile in a chroot)"
    rm -rf "$deps" "$deps.tmp"
    mkdir -p "$deps.tmp"
    cp -a --reflink=auto "$base/rootfs" "$deps.tmp/rootfs"
    local root="$deps.tmp/rootfs"
    mkdir "$root/tmp/wheels"
    cp -l "$wheels"/* "$root/tmp/wheels/" 2>/dev/null || cp "$wheels"/* "$root/tmp/wheels/"
    local pipwhl
    pipwhl="$(cd "$wheels" && ls pip-*.whl)"
    chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 \
        /usr/bin/python3 -m venv --without-pip "$venv"
    heavy chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root PYTHONDONTWRITEBYTECODE=1 \
        "$venv/bin/python" "/tmp/wheels/$pipwhl/pip" install --quiet --disable-pip-version-check \
        --no-cache-dir --no-index --find-links /tmp/wheels --only-binary=:all: --require-hashes \
        --no-warn-script-location --compile -r /tmp/wheels/requirements.lock >&2
    rm -rf "$root/tmp/wheels"
    for path in $prune; do
        [[ -e "$root$venv/lib/python3.11/site-packages/$path" ]] \
            || die "prune: $path is not in $venv's site-packages (image.conf)"
        rm -rf "${root:?}$venv/lib/python3.11/site-packages/$path"
    done
    step "$name deps $deps_key: packing the layer ($(du -sh "$root$venv" | cut -f1))"
    tar -C "$root" --numeric-owner --sort=name -cf "$deps.tmp/layer.tar" "./${venv#/}"
    touch "$deps.tmp/done"
    mv "$deps.tmp" "$deps"
}

# --- layer 3: the product wheel (and the trainer's examples) ---------------
# build_app NAME VENV APPDIR FILES... -> sets app_key and app
build_app() {
    local name="$1" venv="$2" appdir="$3"
    shift 3
    local files=("$@") files_digest=""
    if [[ ${#files[@]} -gt 0 ]]; then files_digest="$("${tool[@]}" digest "${files[@]}")"; fi
    # The trainer carries no product code (the launcher comes from the controller
    # image's init container), so its layer does not change with the product.
    local product="$wheel_digest"
    if [[ $with_wheel -eq 0 ]]; then product="no-product"; fi
    app_key="$(printf '%s\n' "recipe=$recipe" "$deps_key" "$product" "$appdir" "${files[@]}" "$files_digest" | sha)"
    app="$cache/app/$name-$app_key"
    if [[ $rebuild -eq 0 && -f "$app/done" ]]; then
        step "$name app $app_key: cached (product $product)"
        return
    fi
    if [[ $with_wheel -eq 1 ]]; then product_wheel; fi
    step "$name app $app_key: $([[ $with_wheel -eq 1 ]] && basename "$wheel" || echo "no product")${files[*]:+ + ${files[*]##*/} in $appdir}"
    rm -rf "$app" "$app.tmp"
    mkdir -p "$app.tmp"
    local root="$deps/rootfs" stage=/.ring-image-stage
    rm -rf "$root$stage" "$root/tmp/app"
    mkdir -p "$root$stage" "$root/tmp/app"
    if [[ $with_wheel -eq 1 ]]; then
        cp "$wheel" "$root/tmp/app/"
        local pipwhl wheels
        wheels="$cache/wheels/$(cat "build/image/$lockname" <(echo "$PIP") | sha)"
        pipwhl="$(cd "$wheels" && ls pip-*.whl)"
        cp "$wheels/$pipwhl" "$root/tmp/app/"
        # --root stages the files apart from the venv they belong to, so the layer
        # holds exactly them; bytecode is compiled with the staging prefix stripped.
        chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root PYTHONDONTWRITEBYTECODE=1 \
            "$venv/bin/python" "/tmp/app/$pipwhl/pip" install --quiet --disable-pip-version-check \
            --no-cache-dir --no-index --no-deps --no-compile --no-warn-script-location \
            --root "$stage" "/tmp/app/$(basename "$wheel")" >&2
    fi
    if [[ ${#files[@]} -gt 0 ]]; then
        install -d -m 0755 "$root$stage$appdir"
        install -m 0644 "${files[@]}" "$root$stage$appdir/"
    fi
    if [[ $with_wheel -eq 1 ]]; then
        chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 \
            "$venv/bin/python" -m compileall -q -s "$stage" "$stage$venv" >&2
    fi
    tar -C "$root$stage" --numeric-owner --sort=name -cf "$app.tmp/layer.tar" \
        $(cd "$root$stage" && ls -A | sed 's|^|./|')
    rm -rf "$root$stage" "$root/tmp/app"
    touch "$app.tmp/done"
    mv "$app.tmp" "$app"
}

# --- the image: an OCI layout (imagetool.py oci), skopeo (docker-archive) ---
# build_image NAME VENV; uses base, deps, app; sets image_dir, built
build_image() {
    local name="$1" venv="$2" ref="$1:$version"
    local -a config=(
        --user "$USER_ID:$GROUP_ID"
        --env "PATH=$venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        --env PYTHONDONTWRITEBYTECODE=1
        --env PYTHONUNBUFFERED=1
        --env "HOME=$USER_HOME"
        --label "org.opencontainers.image.title=$name"
        --label "org.opencontainers.image.version=$version"
    )
    if [[ "$name" == "$CONTROLLER_IMAGE" ]]; then
        config+=(--entrypoint "[\"$CONTROLLER_ENTRYPOINT\"]" --workdir /)
        for port in $CONTROLLER_EXPOSE; do config+=(--expose "$port/tcp"); done
    else
        config+=(--cmd "[\"python\", \"$TRAINER_APP/train.py\"]" --workdir "$TRAINER_APP"
            --env TF_CPP_MIN_LOG_LEVEL=1)
    fi
    local image_key
    image_key="$(printf '%s\n' "recipe=$recipe" "$app_key" "$ref" "${config[@]}" | sha)"
    image_dir="$cache/images/$name-$image_key"
    built=0
    if [[ $rebuild -eq 0 && -f "$image_dir/done" ]]; then
        step "$ref image $image_key: cached"
    else
        # One OCI layout for every image. Layers are stored uncompressed (the
        # cached layer tars, hardlinked): gzip of the 1.7 GB TensorFlow layer
        # took minutes here, and the docker-archive is uncompressed anyway.
        step "$ref image $image_key: OCI layout $cache/oci, skopeo -> docker-archive"
        local size
        size="$("${tool[@]}" oci "$cache/oci" "$name-$image_key" "$name-$version" "${config[@]}" \
            --layer "$base/layer.tar=mmdebstrap $SUITE --variant=$VARIANT + $packages; user $USER_ID:$GROUP_ID" \
            --layer "$deps/layer.tar=$venv: $name dependencies (build/image/$lockname)" \
            --layer "$app/layer.tar=$name $version app layer (key $app_key)")"
        rm -rf "$image_dir" "$image_dir.tmp"
        mkdir -p "$image_dir.tmp"
        skopeo copy --quiet "oci:$cache/oci:$name-$image_key" "docker-archive:$image_dir.tmp/image.tar:$ref" >&2
        echo "$name-$image_key" >"$image_dir.tmp/tag"
        echo "$size" >"$image_dir.tmp/size"
        touch "$image_dir.tmp/done"
        mv "$image_dir.tmp" "$image_dir"
        built=1
        # Each archive is a full copy (1.5 GB for the trainer): keep the two newest.
        local old
        for old in $(ls -dt "$cache/images/$name-"* 2>/dev/null | grep -v '\.tmp$' | tail -n +3); do
            rm -rf "$old"
        done
    fi
    image_ref="$cache/oci:$(cat "$image_dir/tag")"
    local dest="$out/$name-$version.tar"
    rm -f "$dest"
    ln "$image_dir/image.tar" "$dest" 2>/dev/null || cp "$image_dir/image.tar" "$dest"
}

# --- the self-check: runc, user 65532, read-only root ----------------------
check_run() {  # check_run BUNDLE ARG... : run ARGs in the bundle, print output
    local bundle="$1"
    shift
    "${tool[@]}" bundle "$bundle/config.json" --tmpfs /tmp -- "$@" >/dev/null
    local id="ring-image-check-$$-$RANDOM"
    if ! runc run --bundle "$bundle" "$id" </dev/null >"$bundle/out" 2>&1; then
        runc delete --force "$id" >/dev/null 2>&1 || true
        cat "$bundle/out" >&2
        die "self-check failed in $ref_checked: $*"
    fi
    cat "$bundle/out"
}

check_image() {
    local name="$1" venv="$2"
    ref_checked="$name:$version"
    step "$ref_checked check: runc as $USER_ID:$GROUP_ID, read-only root, no capabilities, tmpfs /tmp"
    local tags
    tags="$("${tool[@]}" repotags "$image_dir/image.tar" | xargs)"
    [[ "$tags" == *"$name:$version"* ]] || die "docker-archive tags are '$tags', want $name:$version"
    local bundle
    bundle="$(mktemp -d "$cache/check.XXXXXX")"
    # The image's own layer blobs, extracted in order with tar: they only add
    # files (no whiteouts), and tar takes 10 s where umoci unpack took 60 s
    # to 3 min for the trainer. umoci writes the runtime config.
    mkdir -p "$bundle/b/rootfs"
    local layer
    for layer in $("${tool[@]}" layers "$cache/oci" "${image_ref##*:}"); do
        tar -C "$bundle/b/rootfs" --numeric-owner -xpf "$layer"
    done
    umoci raw runtime-config --image "$image_ref" --rootfs "$bundle/b/rootfs" "$bundle/b/config.json"
    local uid
    uid="$("${tool[@]}" bundle "$bundle/b/config.json" -- true)"
    [[ "$uid" == "$USER_ID:$GROUP_ID" ]] || die "image runs as $uid, want $USER_ID:$GROUP_ID"
    local missing
    if ! missing="$("${tool[@]}" pycache "$bundle/b/rootfs" "$venv/lib" "/usr/lib/python3.11")"; then
        die "no bytecode for $(echo "$missing" | wc -l) modules (first: $(echo "$missing" | head -3 | xargs))"
    fi
    echo "    id: $(check_run "$bundle/b" id)" >&2
    if [[ "$name" == "$CONTROLLER_IMAGE" ]]; then
        echo "    ring-launch --help: $(check_run "$bundle/b" ring-launch --help | head -1)" >&2
        echo "    clients: $(check_run "$bundle/b" python -c 'import kubernetes.client, kubernetes.config, kubernetes_asyncio.client, prometheus_client, structlog, yaml; print("kubernetes", kubernetes.__version__, "kubernetes_asyncio", kubernetes_asyncio.__version__)')" >&2
        echo "    ring-controller --version: $(check_run "$bundle/b" ring-controller --version)" >&2
        # What the init container does, as 65532 on the read-only root: install into a writable dir.
        echo "    ring-launch.pyz --install: $(check_run "$bundle/b" sh -c \
            "python3 -I -S $LAUNCHER_DIR/ring-launch.pyz --install /tmp/ring 2>&1 && python3 -I -S /tmp/ring/ring-launch.pyz --help | head -1")" >&2
    else
        echo "    import tensorflow: $(check_run "$bundle/b" python -c \
            'import tensorflow as tf, keras; print("tensorflow", tf.__version__, "keras", keras.__version__)' | tail -1)" >&2
        echo "    examples: $(check_run "$bundle/b" sh -c "python $TRAINER_APP/make_cifar10.py --out /tmp/c --per-batch 8 >/dev/null && ls $TRAINER_APP /tmp/c | xargs")" >&2
        echo "    no product: $(check_run "$bundle/b" sh -c '! command -v ring-launch && ! python -c "import ranktable" 2>/dev/null && echo "no ring-launch, no ranktable"')" >&2
    fi
    rm -rf "$bundle"
}

size_line() {
    local name="$1"
    printf '    %s:%s  %s docker-archive (layers: base %s, deps %s, app %s)' \
        "$name" "$version" "$(du -h "$out/$name-$version.tar" | cut -f1)" \
        "$(du -h "$base/layer.tar" | cut -f1)" "$(du -h "$deps/layer.tar" | cut -f1)" \
        "$(du -h "$app/layer.tar" | cut -f1)"
}

build_base
summary=() sizes=()
for name in controller trainer; do
    if [[ $name == controller ]]; then
        [[ $want_controller -eq 1 ]] || continue
        img="$CONTROLLER_IMAGE" venv="$CONTROLLER_VENV" lockname="$CONTROLLER_LOCK" light=1 prune="$CONTROLLER_PRUNE" with_wheel=1
        step "launcher: $("$python" build/launcher/pyz.py --out dist/ring-launch.pyz)"
        appdir="$LAUNCHER_DIR" files=(dist/ring-launch.pyz)
    else
        [[ $want_trainer -eq 1 ]] || continue
        img="$TRAINER_IMAGE" venv="$TRAINER_VENV" lockname="$TRAINER_LOCK" appdir="$TRAINER_APP" light=0 prune="$TRAINER_PRUNE" with_wheel=0
        read -r -a files <<<"$TRAINER_EXAMPLES"
    fi
    t0=$SECONDS
    build_deps "$img" "$venv" "$lockname"
    build_app "$img" "$venv" "$appdir" "${files[@]}"
    build_image "$img" "$venv"
    if [[ $built -eq 1 || $force_check -eq 1 ]]; then check_image "$img" "$venv"; fi
    step "$img:$version -> $out/$img-$version.tar ($((SECONDS - t0))s)"
    summary+=("$img")
    sizes+=("$(size_line "$img")")
done

if [[ $do_import -eq 1 ]]; then
    if [[ ! -S "$containerd" ]]; then
        die "--import: no containerd socket at $containerd (start the real node first: ring-devcluster up --with node); the images are in $out"
    fi
    command -v ctr >/dev/null 2>&1 || die "--import: ctr is not on PATH (containerd's client)"
    for img in "${summary[@]}"; do
        step "importing $out/$img-$version.tar into containerd ($containerd, namespace k8s.io)"
        ctr --address "$containerd" -n k8s.io images import "$out/$img-$version.tar" >&2
        ctr --address "$containerd" -n k8s.io images ls -q "name==docker.io/library/$img:$version" | grep -q . \
            || die "--import: docker.io/library/$img:$version is not in containerd after the import"
    done
fi

step "done in $((SECONDS - started))s"
printf '%s\n' "${sizes[@]}" >&2
