#!/usr/bin/env bash
# check_deps.sh [OBJDIR]: proves that dependencies between the source folders
# run one way, downwards. Run from the source root; OBJDIR (default build/obj)
# holds build/obj/<path>.o for every <path>.c, as the Makefile lays it out.
#
# Levels, bottom to top (a folder's sub-folders, e.g. model/cpu/, belong to
# it, except where a sub-folder has a level of its own: train/'s rooms):
#   0 include/                 headers; header-only (static inline) code
#   1 data/  model/  optim/    siblings: none may use another
#   2 parallel/
#   3 train/config/            keys, limits, what a grid can run
#   4 train/measure/           the instruments: timeline, trace, peak, machine, progress
#   5 train/theory/            formulas and the planner (from the config alone)
#   6 train/ckpt/ train/report/  the run's files; its tables (siblings)
#   7 train/run/               the loop and the program
# A file may use its own folder and anything on a lower level; tests/ is not
# checked (it may use everything). The *_main.c programs are checked too.
#
# Rules; each violation is one line, and any violation exits 1:
#   include  a .c or .cu file includes "X.h" implemented above its level or
#            in a sibling, directly or through the headers X.h includes. X.h
#            is implemented in the folders of the objects that define (nm) a
#            name it declares (`name(` or `extern ... name;`), else it is
#            header-only (include/). A header outside include/ is
#            implemented in its own folder. So a header of types only (the
#            run context, train/measure/trainer.h) sits as high as what it
#            includes, and only files at least that high may include it.
#   link     an object uses (nm -u) a symbol defined by an object above its
#            level or in a sibling; catches local prototypes that skip headers.
#   cycle    .c files that use each other's symbols in a circle (file level).
#   header   a header in include/ that fewer than two library folders (data/,
#            model/, optim/, parallel/, train/) use, directly or through the
#            headers that include it; tests/ and bench/ do not count. Such a
#            header lives beside its code (docs/ARCHITECTURE.md, include/).
#   path     a comment names a file or folder that does not exist
#            (tests/check_comment_paths.py, which says what it reads).
set -euo pipefail
objdir=${1:-build/obj}
[ -d "$objdir" ] || { echo "check_deps: no object folder $objdir (build first)" >&2; exit 2; }
status=0
"$(dirname "$0")/check_comment_paths.py" . || status=1
levels="include:0 data:1 model:1 optim:1 parallel:2 train/config:3 train/measure:4 train/theory:5 train/ckpt:6 train/report:6 train/run:7"
folders=$(for d in ${levels//:[0-9]/}; do if [ -d "$d" ]; then echo "${d%%/*}"; fi; done | sort -u)
decomment() {   # drops comments, keeps the rest (.cu read as C++; -w: both branches of an #ifdef are read, so a macro defined in each is no news)
    case $1 in *.cu) gcc -w -x c++ -fpreprocessed -dD -E -P "$1" ;; *) gcc -w -fpreprocessed -dD -E -P "$1" ;; esac
}

# Objects of the sources that exist (a stale .o of a moved file is skipped);
# a .cu file's object (the CUDA build) counts as its source's too.
objs=$(find "$objdir" -name '*.o' ! -path "$objdir/tests/*" | sort | while read -r o; do
    s=${o#"$objdir"/}; if [ -f "${s%.o}.c" ] || [ -f "${s%.o}.cu" ]; then echo "$o"; fi; done)
[ -n "$objs" ] || { echo "check_deps: no objects under $objdir" >&2; exit 2; }
# Every source is built, except that the CPU build leaves out the CUDA
# build's folders (*/cuda/, `make cuda`); the CUDA build's objdir has them.
# shellcheck disable=SC2086
for c in $(find $folders \( -name "*.c" -o -name "*.cu" \) | sort); do
    o="$objdir/${c%.*}.o"
    case $c in */cuda/*) [ -d "$objdir/$(dirname "$c")" ] || continue ;; esac
    [ -f "$o" ] || { echo "check_deps: $c is not built ($o)" >&2; exit 2; }
done

{
    # S <source> <symbol> <D|U>: what each object defines and uses.
    # shellcheck disable=SC2086
    nm -P -A -g $objs | awk -v dir="$objdir/" -v cus="$(find $folders -name "*.cu" | tr '\n' ' ')" '
    BEGIN { n = split(cus, a, " "); for (i = 1; i <= n; i++) { sub(/\.cu$/, "", a[i]); cu[a[i]] = 1 } }
    {   f = $1; sub(/:$/, "", f); f = substr(f, length(dir) + 1); sub(/\.o$/, "", f)
        f = (f in cu) ? f ".cu" : f ".c"
        print "S", f, $2, ($3 == "U" || $3 == "w") ? "U" : "D" }'
    # shellcheck disable=SC2086
    for f in $(find $folders \( -name "*.[ch]" -o -name "*.cu" \) | sort); do
        text=$(decomment "$f")
        # I <file> <header>: "X.h" resolves to the includer's folder, then include/.
        # shellcheck disable=SC2013 # header names have no spaces
        for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' <<<"$text"); do
            for d in "$(dirname "$f")" include; do
                if [ -f "$d/$h" ]; then echo "I $f $(realpath -ms --relative-to=. "$d/$h")"; break; fi
            done
        done
        # N <header> <name>: the names a header declares.
        case $f in *.h) echo "N $f -"   # "-": every header is listed, even one with no names
            { grep -oE '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\(' <<<"$text" | tr -d '( \t' || true
              grep -E '^[[:space:]]*extern[^(]*;' <<<"$text" | sed -E 's/[[:space:]]*(\[[^]]*\])?[[:space:]]*;.*//; s/.*[^A-Za-z0-9_]//' || true
            } | sort -u | sed "s|^|N $f |" ;;
        esac
    done
} | awk -v levels="$levels" '
function mod(f,   r) {   # a room with a level of its own (train/run), else the top folder
    r = f; if (sub(/\/[^\/]*$/, "", r) && match(r, /^[^\/]+\/[^\/]+/) && (substr(r, 1, RLENGTH) in lvl)) return substr(r, 1, RLENGTH)
    sub(/\/.*/, "", f); return f }
function bad(u, d) {   # true when module u may not use module d
    if (!(u in lvl) || !(d in lvl)) { print "check_deps: unknown folder " (u in lvl ? d : u) "/"; fails++; return 0 }
    return u != d && lvl[d] >= lvl[u]
}
BEGIN { n = split(levels, a, " "); for (i = 1; i <= n; i++) { split(a[i], p, ":"); lvl[p[1]] = p[2] } }
$1 == "S" && $4 == "D" { if ($3 != "main") def[$3] = $2; next }   # every *_main.c has a main
$1 == "S" { nu++; usef[nu] = $2; uses[nu] = $3; next }
$1 == "I" { ni++; incf[ni] = $2; inch[ni] = $3; next }
$1 == "N" { nn++; declh[nn] = $2; decln[nn] = $3; next }
END {
    # Implementing modules of each header, with one example symbol each.
    for (i = 1; i <= nn; i++) {
        h = declh[i]; s = decln[i]
        if (h !~ /^include\//) { m = mod(h); why = "own folder" }
        else if (s in def) { m = mod(def[s]); why = s " in " def[s] }
        else continue
        if (!((h, m) in impl)) { impl[h, m] = why; hm[h] = hm[h] " " m }
    }
    # Rule 1: includes, checked at the including source file, through every
    # header its header includes (a header of types only has no folder of
    # its own: what it reaches is what its includer takes on).
    for (i = 1; i <= ni; i++) { if (incf[i] ~ /\.h$/) { nh[incf[i]]++; hinc[incf[i], nh[incf[i]]] = inch[i] } }
    for (i = 1; i <= ni; i++) {
        f = incf[i]; if (f ~ /\.h$/) continue
        delete walked; reach(f, inch[i], inch[i])
    }
    # Rule 2: links; and the file graph for rule 3 (edges in sorted input order).
    for (i = 1; i <= nu; i++) {
        f = usef[i]; s = uses[i]
        if (!(s in def) || def[s] == f) continue
        if (bad(mod(f), mod(def[s]))) { print "link: " f " uses " s " from " def[s]; fails++ }
        if (!((f, def[s]) in edge)) { edge[f, def[s]] = s; nadj[f]++; adj[f, nadj[f]] = def[s]
                                       if (!(f in seen)) { seen[f] = 1; nodes[++nv] = f } }
    }
    # Rule 3: depth-first search; each back edge closes one reported cycle.
    for (i = 1; i <= nv; i++) if (!color[nodes[i]]) dfs(nodes[i])
    # Rule 4: the library folders that use each header of include/.
    for (i = 1; i <= ni; i++) {
        f = incf[i]; if (f ~ /^include\//) continue
        top = f; sub(/\/.*/, "", top)
        delete walked; mark(top, inch[i])
    }
    for (i = 1; i <= nn; i++) {
        h = declh[i]; if (h !~ /^include\// || (h in hdone)) continue
        hdone[h] = 1
        if (nusers[h] >= 2) continue
        print "header: " h " is used by " (nusers[h] ? "one library folder, " users[h] "/" : "no library folder") \
              "; it belongs beside its code"; fails++
    }
    exit (fails > 0)
}
function mark(top, h,   k) {   # folder top uses h and every header h includes
    if (h in walked) return
    walked[h] = 1
    if (h ~ /^include\// && !((h, top) in used)) { used[h, top] = 1; nusers[h]++; users[h] = top }
    for (k = 1; k <= nh[h]; k++) mark(top, hinc[h, k])
}
function reach(f, top, h,   nto, to, y, k, m) {   # f includes top, which reaches h
    if (h in walked) return
    walked[h] = 1
    m = mod(f)
    nto = split((h in hm) ? hm[h] : " include", to, " ")
    for (y = 1; y <= nto; y++) if (bad(m, to[y]) && !((f, h, to[y]) in told)) {
        told[f, h, to[y]] = 1
        print "include: " f " includes " top (h != top ? ", which reaches " h : "") \
              ", implemented in " to[y] "/ (" impl[h, to[y]] ")"; fails++ }
    for (k = 1; k <= nh[h]; k++) reach(f, top, hinc[h, k])
}
function dfs(v,   i, w, j, c) {
    color[v] = 1; stack[++depth] = v
    for (i = 1; i <= nadj[v]; i++) {
        w = adj[v, i]
        if (color[w] == 1) {
            c = ""; for (j = depth; stack[j] != w; j--) ;
            for (; j <= depth; j++) c = c stack[j] " -(" edge[stack[j], (j < depth ? stack[j+1] : w)] ")-> "
            print "cycle: " c w; fails++
        } else if (!color[w]) dfs(w)
    }
    color[v] = 2; depth--
}' || status=1
exit "$status"
