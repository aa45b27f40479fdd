#!/usr/bin/env bash
# ckpt_export_safety.sh TOOL FILE DIR: `TOOL export` never writes into an existing file:
# not an input named like its temporary, nor one a link there points to, nor a FIFO or a
# directory or a link (dangling or not) given as OUT, nor an existing file that no export wrote (another checkpoint, a
# `latest`: refused, status 2, nothing left behind); its own earlier output it overwrites.
# A failed `export --hf` (a file size limit below the weights' size: the weights fail, not
# config.json, which is smaller) leaves an earlier export in its directory as it was (the
# same files, not replaced), and no directory it made.
set -u
tool=$1 file=$2 dir=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" || fail "cannot make $dir"
cp "$file" "$dir/in.st.tmp"
"$tool" export "$dir/in.st.tmp" "$dir/in.st" >/dev/null || fail "export of in.st.tmp failed"
"$tool" verify "$dir/in.st.tmp" >/dev/null || fail "the input named like the temporary was damaged"
cp "$file" "$dir/linked.h5"
ln -s linked.h5 "$dir/out.st.tmp"
"$tool" export "$dir/linked.h5" "$dir/out.st" >/dev/null || fail "export next to a link failed"
"$tool" verify "$dir/linked.h5" >/dev/null || fail "the file a link named out.st.tmp points to was damaged"
mkfifo "$dir/fifo"
"$tool" export "$file" "$dir/fifo" >/dev/null 2>&1
[ $? -eq 2 ] || fail "export onto a FIFO: expected status 2"
[ -p "$dir/fifo" ] || fail "the FIFO was replaced"
mkdir "$dir/sub"
out=$("$tool" export "$file" "$dir/sub" 2>&1)
[ $? -eq 2 ] || fail "export onto a directory: expected status 2: $out"
ln -s in.st "$dir/link.st" && ln -s nowhere.st "$dir/dangling.st"
for link in link.st dangling.st; do
  out=$("$tool" export "$file" "$dir/$link" 2>&1)
  [ $? -eq 2 ] || fail "export onto the link $link: expected status 2: $out"
  [ -L "$dir/$link" ] || fail "the link $link was replaced"
done
[ ! -e "$dir/nowhere.st" ] || fail "export made the file a dangling link names"
cp "$file" "$dir/other.h5" && echo step_00000004.h5 > "$dir/latest"
for kept in other.h5 latest; do
  out=$("$tool" export "$file" "$dir/$kept" 2>&1)
  [ $? -eq 2 ] || fail "export onto $kept: expected status 2: $out"
  echo "$out" | grep -q "exists and is not an earlier export" || fail "export onto $kept: $out"
done
"$tool" verify "$dir/other.h5" >/dev/null || fail "the other checkpoint was overwritten"
[ "$(cat "$dir/latest")" = step_00000004.h5 ] || fail "latest was overwritten"
"$tool" export "$file" "$dir/in.st" >/dev/null || fail "export over its own earlier output failed"
"$tool" export --hf "$file" "$dir/hf" >/dev/null && "$tool" export --hf "$file" "$dir/hf" >/dev/null ||
  fail "--hf export over its own earlier output failed"
sums=$(cd "$dir/hf" && md5sum * && ls -i)
small_files() { bash -c 'trap "" XFSZ; ulimit -f 16; exec "$@"' _ "$@"; }
out=$(small_files "$tool" export --hf "$file" "$dir/hf" 2>&1)
[ $? -eq 2 ] || fail "--hf export under a file size limit: expected status 2: $out"
[ "$(cd "$dir/hf" && md5sum * && ls -i)" = "$sums" ] || fail "a failed --hf export changed the earlier one: $(ls -l "$dir/hf")"
out=$(small_files "$tool" export --hf "$file" "$dir/new/hf" 2>&1)
[ $? -eq 2 ] || fail "--hf export to a new directory under a file size limit: expected status 2: $out"
[ ! -e "$dir/new" ] || fail "a failed --hf export left the directory it made: $(ls -R "$dir/new")"
left=$(ls "$dir" | grep -c '^sub\.\|^fifo\.')
[ "$left" -eq 0 ] || fail "temporary files left behind: $(ls "$dir")"
echo "ok: export wrote only its own new files"
