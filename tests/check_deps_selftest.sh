#!/usr/bin/env bash
# Self-test of tests/check_deps.sh, so the check itself can fail: a tiny tree
# that keeps the rules must pass; the same tree plus an upward include and
# call, a sibling call through a local prototype, a two-file cycle, a
# header in include/ that one folder uses and a comment naming a file that
# does not exist must fail with exactly those violations reported.
set -euo pipefail
check=$(cd "$(dirname "$0")" && pwd)/check_deps.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
mkdir -p include model optim parallel train/run train/ckpt train/report
fail() { echo "check_deps_selftest: $1" >&2; cat out >&2; exit 1; }
build() {
    for c in */*.c */*/*.c; do
        mkdir -p "obj/$(dirname "$c")"
        cc -c -Iinclude "$c" -o "obj/${c%.c}.o"
    done
}

# Clean: train/run/ uses model/ through a header in include/, downwards;
# train/run/'s own header sits beside its code.
echo 'int low(int x);' > include/low.h
echo 'int top(int x);' > train/run/top.h
printf '#include "low.h"\nint low(int x) { return x + 1; }\n' > model/low.c
printf '#include "top.h"\n#include "low.h"\n/* low(): model/low.c */\nint top(int x) { return low(x); }\n' > train/run/top.c
build
"$check" obj > out 2>&1 || fail "a tree that keeps the rules fails:"

# Violations: model/ calls up into train/run/ (through include/api.h, which
# model/ and train/ use: two folders) and across into optim/; a cycle;
# train/ckpt/ reaches up into train/run/ through include/agg.h, a header
# of types only that train/ alone uses, and calls across into its sibling
# room train/report/.
echo 'int top(int x);' > include/api.h
echo 'int side(int x) { return x; }' > optim/side.c
printf '#include "api.h"\nint side(int x);\n/* side(): optim/gone.c */\nint up(int x) { return top(side(x)); }\n' > model/up.c
echo 'int pong(int x); int ping(int x) { return x ? pong(x - 1) : 0; }' > parallel/ping.c
echo 'int table(int x) { return x; }' > train/report/table.c
printf '#include "api.h"\nstruct run { int x; };\n' > include/agg.h
printf '#include "agg.h"\nint table(int x);\nint save(struct run *r) { return table(r->x); }\n' > train/ckpt/save.c
echo 'int ping(int x); int pong(int x) { return x ? ping(x - 1) : 1; }' > parallel/pong.c
build
if "$check" obj > out 2>&1; then fail "a tree with violations passes:"; fi
cat > want <<'EOF'
path: model/up.c:3 names optim/gone.c, which does not exist
include: model/up.c includes include/api.h, implemented in train/run/ (top in train/run/top.c)
include: train/ckpt/save.c includes include/agg.h, which reaches include/api.h, implemented in train/run/ (top in train/run/top.c)
link: model/up.c uses side from optim/side.c
link: model/up.c uses top from train/run/top.c
link: train/ckpt/save.c uses table from train/report/table.c
cycle: parallel/ping.c -(pong)-> parallel/pong.c -(ping)-> parallel/ping.c
header: include/agg.h is used by one library folder, train/; it belongs beside its code
EOF
diff want out > /dev/null || { diff want out >&2; fail "reports differ from the expected (diff above)"; }
echo "check_deps self-test: ok"
