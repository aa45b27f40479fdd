# flip_bits FILE AT MASK: XORs the byte at offset AT of FILE with MASK, in place.
flip_bits() {
  local byte
  byte=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $((byte ^ $3)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
