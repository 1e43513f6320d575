#!/usr/bin/env bash
# check_references.sh — the repository refers only to itself.
#
#   bash test/docs/check_references.sh SOURCE_ROOT [FILE...]   (CTest: docs_references, label unit)
#
# A learner who follows a pointer in a comment or a document must land on something that exists in this
# tree. Every tracked text file (`git ls-files`; without git, every file under SOURCE_ROOT except .git,
# build*/ and data/generated/) is searched, line by line, for five kinds of pointer that lead nowhere (with
# FILEs, only those are searched: the negative-control tests in test/docs/docs.cmake plant a wrong one):
#
#  1. A Markdown file that does not exist. A word ending in ".md" (e.g. docs/paper.md, ../../README.md) must
#     name an existing path, relative to the folder of the file that mentions it or to SOURCE_ROOT. A
#     leading shell or CMake variable (`$src/`, `${CMAKE_SOURCE_DIR}/`) stands for the root and is dropped;
#     a name assembled from variables (`${name}.md`), a bare pattern (`*.md`) and a quoted string that
#     starts with "/" (the tail of a path a program builds at run time: dir + "/notes.md") are not names
#     of files in this tree, and are skipped. URLs (anything after `scheme://`) are removed from the line first: links to the web are fine.
#  2. An absolute path of a particular machine: a path that starts at one of the roots where people keep
#     their checkouts and home folders (listed in MACHINE_ROOTS below: the home folders of Linux and macOS,
#     root's home, mount points, shared work and scratch areas) or at a Windows drive (`C:\...`). Paths that
#     every Linux machine has and that the code uses on purpose — /tmp, /usr, /dev, /proc, /sys, /etc, /bin,
#     /opt — are allowed. A root counts only where a path starts: a root's name after another folder
#     ("data/" then the root's name) or after a variable ("${DIR}/" then the name) is a relative path.
#  3. The project's former workspace folder beside the repository: "..", then "shared".
#  4. A section that does not exist. A .md name followed by a quoted name (`docs/design.md "Ops"`, also after a
#     comma) cites a section: some heading of that file must contain the quoted words.
#  5. A name said to be in a file that does not hold it. A code name followed by "in" and a source file
#     (`sync_gradients` in model/train_step.cu, also without the backticks when the name has an underscore
#     or ends in "()") or a source file, "'s" and a code name (model/gpt.cu's `gpt_step_shape`) says where
#     the reader will find it: the file must exist (relative to the folder of the file that says so, to
#     SOURCE_ROOT, or, for a bare file name, the one tracked file of that name) and contain the name as a
#     word. Source files: .cu .cuh .h .cpp .py .sh .cmake. A claim may wrap after its "in" (the file then
#     starts the next line, after its comment marker).
#
# Prints one line per hit (file:line: what) and exits 1 when there is any, else prints a summary, exit 0.
set -u
root=${1:?usage: check_references.sh SOURCE_ROOT [FILE...]}
shift
cd "$root" || { echo "check_references: cannot enter $root" >&2; exit 2; }

# Directory names that start a machine-specific absolute path (see 2. above). Kept as bare words, so that
# this script does not contain the paths it rejects.
MACHINE_ROOTS="home root Users work mnt media scratch"

list_files() {
    if [ "$#" -gt 0 ]; then
        printf '%s\0' "$@"
    elif command -v git >/dev/null 2>&1 && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -z
    else
        find . \( -name .git -o -name 'build*' -o -path ./data/generated \) -prune -o -type f -print0
    fi
}

# Text files only (grep -I skips binaries such as the PNG pictures); a tracked file deleted from the work
# tree is skipped.
mapfile -d '' files < <(list_files "$@" | xargs -0 -r grep -IlZ -e '' -- 2>/dev/null)
if [ "${#files[@]}" -eq 0 ]; then
    echo "check_references: no files found under $root" >&2
    exit 2
fi

roots_re=$(echo "$MACHINE_ROOTS" | tr ' ' '|')
# Every file of the tree (not only the searched ones): where a bare file name of rule 5 may point.
mapfile -t tracked < <(list_files | tr '\0' '\n' | sed 's#^\./##')
# awk prints the candidates, one per line: FILE <tab> LINE <tab> KIND <tab> TEXT, where KIND is md (a .md name
# to look up), abs (an absolute machine path), shared (the old workspace folder), section (a .md name and a
# section) or in (a source file and a name said to be in it: FILE LINE in PATH NAME).
scan() {
    awk -v roots="$roots_re" '
    BEGIN {
        tail = "[^ \t\"\047`<>(),;]*"                                  # the rest of the path, for the message
        abs_re = "[^A-Za-z0-9_.~/$})-]/(" roots ")/" tail
        win_re = "[^A-Za-z0-9_%\\\\][A-Z]:[\\\\/][\\\\/]?[A-Za-z0-9_. -][A-Za-z0-9_. -]+[\\\\/]" tail
        shared_re = "[.][.]/shared[^A-Za-z0-9_]"
        src = "[A-Za-z0-9_./-]*[A-Za-z0-9_][.](cu|cuh|h|cpp|py|sh|cmake)"  # a source file
        name = "[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*"       # a code name
        # 5.: `name` in file, name_with_underscore in file, name() in file; file\047s `name`, file\047s name_x
        in_re = "(`" name "(\\(\\))?` in `?|[A-Za-z0-9_:]*_" name "(\\(\\))? in `?|" name "\\(\\) in `?)" src
        poss_re = src "\047s `?" name
        claim_end = "(`" name "(\\(\\))?`|[A-Za-z0-9_:]*_" name "(\\(\\))?|" name "\\(\\)) in( `)?$"  # on the line with its trailing blanks cut
    }
    FNR == 1 { carry = "" }
    {
        line = $0
        gsub(/[A-Za-z][A-Za-z0-9+.-]*:\/\/[^ \t"<>()]*/, "", line)   # URLs
        padded = " " line " "
        if (match(padded, abs_re)) print FILENAME "\t" FNR "\tabs\t" substr(padded, RSTART + 1, RLENGTH - 1)
        if (match(padded, win_re)) print FILENAME "\t" FNR "\tabs\t" substr(padded, RSTART + 1, RLENGTH - 1)
        if (match(padded, shared_re)) print FILENAME "\t" FNR "\tshared\t" substr(padded, RSTART, RLENGTH - 1)
        # A claim wrapped after its "in": the name ends the previous line, the file starts this one (after the
        # comment marker), and it is reported at the previous line.
        if (carry != "") {
            body = line
            sub(/^[ \t]*(\/\/+|#+|\*|<!--)?[ \t]*/, "", body)
            if (match(carry " " body, "^" in_re) && substr(carry " " body, RLENGTH + 1, 1) !~ /[A-Za-z0-9_]/) {
                hit = substr(carry " " body, 1, RLENGTH)
                n = hit; sub(/`? in `?.*$/, "", n); gsub(/[`()]/, "", n)
                f = hit; sub(/^.* in `?/, "", f)
                print FILENAME "\t" (FNR - 1) "\tin\t" f "\t" n
            }
        }
        trimmed = line
        sub(/[ \t]+$/, "", trimmed)
        carry = match(trimmed, claim_end) ? substr(trimmed, RSTART, RLENGTH) : ""
        rest = line
        while (match(rest, in_re)) {
            hit = substr(rest, RSTART, RLENGTH)
            pre = RSTART > 1 ? substr(rest, RSTART - 1, 1) : ""
            rest = substr(rest, RSTART + RLENGTH)
            if (rest ~ /^[A-Za-z0-9_]/) continue                        # foo.hpp, foo.cmake2, ...
            if (pre ~ /[A-Za-z0-9_]/) continue                         # the middle of a longer word
            n = hit; sub(/`? in `?.*$/, "", n); gsub(/[`()]/, "", n)
            f = hit; sub(/^.* in `?/, "", f)
            print FILENAME "\t" FNR "\tin\t" f "\t" n
        }
        rest = line
        while (match(rest, poss_re)) {
            hit = substr(rest, RSTART, RLENGTH)
            pre = RSTART > 1 ? substr(rest, RSTART - 1, 1) : ""
            rest = substr(rest, RSTART + RLENGTH)
            if (rest ~ /^[A-Za-z0-9_]/) continue
            if (pre ~ /[A-Za-z0-9_.\/-]/) continue
            f = hit; sub(/\047s `?.*$/, "", f)
            n = hit; sub(/^.*\047s `?/, "", n)
            if (hit !~ /\047s `/ && n !~ /_/) continue                  # file\047s plain English word
            print FILENAME "\t" FNR "\tin\t" f "\t" n
        }
        rest = line
        while (match(rest, /[.$%{}A-Za-z0-9_][$%{}A-Za-z0-9_.\/-]*[.]md/)) {
            tok = substr(rest, RSTART, RLENGTH)
            before = RSTART > 2 ? substr(rest, RSTART - 2, 2) : ""
            after = substr(rest, RSTART + RLENGTH, 1)
            rest = substr(rest, RSTART + RLENGTH)
            if (after ~ /[A-Za-z0-9_]/) continue                      # .mdx, .md5, ...
            if (before ~ /^["\047]\/$/) continue                       # dir + "/notes.md": built at run time
            sub(/^(\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*|%s)\//, "", tok)
            if (tok ~ /[$%{}]/) continue                               # assembled from variables
            if (tok !~ /[A-Za-z0-9_][.]md$/) continue                  # *.md, a bare ".md"
            print FILENAME "\t" FNR "\tmd\t" tok
            if (match(rest, /^,? "[^"]+"/)) {                           # a .md name, then a quoted section
                name = substr(rest, 1, RLENGTH)
                sub(/^,? "/, "", name)
                sub(/"$/, "", name)
                print FILENAME "\t" FNR "\tsection\t" tok "\t" name
            }
        }
    }' "$@"
}

hits=0 claims=0
while IFS=$'\t' read -r file line kind text section; do
    case $kind in
        md)
            dir=$(dirname -- "$file")
            if [ -e "$dir/$text" ] || [ -e "$text" ]; then continue; fi
            echo "${file#./}:$line: refers to $text, which is not in the repository"
            ;;
        section)
            dir=$(dirname -- "$file")
            md=$text
            [ -e "$dir/$text" ] && md=$dir/$text
            [ -f "$md" ] || continue                                   # reported as a missing file already
            if grep -E '^#+ ' -- "$md" | grep -qF -- "$section"; then continue; fi
            echo "${file#./}:$line: $text has no section \"$section\""
            ;;
        in)
            dir=$(dirname -- "$file")
            where=""
            if [ -f "$dir/$text" ]; then where=$dir/$text
            elif [ -f "$text" ]; then where=$text
            elif [ "${text#*/}" = "$text" ]; then                       # a bare file name: the one of that name
                mapfile -t same < <(printf '%s\n' "${tracked[@]}" | grep -E "(^|/)${text//./[.]}\$")
                [ "${#same[@]}" -eq 1 ] && where=${same[0]}
            fi
            if [ -z "$where" ]; then
                echo "${file#./}:$line: says $section is in $text, which is not in the repository"
            elif grep -qwF -- "$section" "$where"; then
                claims=$((claims + 1))
                continue
            else
                echo "${file#./}:$line: says $section is in $text, which has no $section"
            fi
            ;;
        abs) echo "${file#./}:$line: absolute path of a machine: $text" ;;
        shared) echo "${file#./}:$line: refers to the folder beside the repository: $text" ;;
    esac
    hits=$((hits + 1))
done < <(scan "${files[@]}")

if [ "$hits" -gt 0 ]; then
    echo "check_references: $hits reference(s) that lead outside the repository or to a file without the name (rules: test/docs/check_references.sh)"
    exit 1
fi
echo "check_references: ${#files[@]} files, every reference stays inside the repository; $claims names said to be in a file are there"
