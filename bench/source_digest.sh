#!/usr/bin/env bash
# Digests of the CUDA sources generated for the benchmark kernels (G1, G4, G5, J1 and neighbours), with
# the library's default settings, through `factorjit compile` (NVRTC, no GPU needed). A change that must
# not move the generated code (a refactoring) shows it by an unchanged list:
#   bench/source_digest.sh build > before.txt; ...; bench/source_digest.sh build | diff before.txt -
# Each line: the case, the digest of the source, the digest of its cubin (sm_90). A change that touches only
# the sources' comments (a renamed file they cite) keeps the cubins' digests.
# The sources and cubins are kept in $SRC_DIR (default /tmp/fj_source_digest) for a diff of the text.
set -euo pipefail
BUILD=${1:-build}
CLI=$BUILD/factorjit
SRC_DIR=${SRC_DIR:-/tmp/fj_source_digest}
mkdir -p "$SRC_DIR"
corr() { echo "corr(window(A,$1), window(B,$1))"; }
cases=(
  # name | dtype | ld (0: generic kernel) | expressions (';'-separated outputs)
  "G1|f32|50000|$(corr 20)"
  "G4|f32|50000|$(corr 250)"
  "G5|f32|4000|$(corr 20)"
  "corr128|f32|50000|$(corr 128)"
  "corr10|f32|50000|$(corr 10)"
  "cov250|f32|50000|cov(window(A,250), window(B,250))"
  "cov20|f32|50000|cov(window(A,20), window(B,20))"
  "covmp|f32|50000|cov(window(A,20,5), window(B,20,5))"
  "std20|f32|50000|std(window(A,20))"
  "std5|f32|50000|std(window(A,5))"
  "std500|f32|50000|std(window(A,500))"
  "mean10|f32|50000|mean(window(A,10))"
  "max30|f32|50000|max(window(A,30))"
  "corr20_64|f64|50000|$(corr 20)"
  "J1corr|f32|0|$(corr 20)"
  "J1std|f32|0|std(window(A,250))"
  "J1nest|f32|0|mean(window(std(window(A,5)),10))"
  "J1max|f32|0|max(window(A,30))"
  "J1delay|f32|0|A*B - delay(A,1)"
  "corr20_64g|f64|0|$(corr 20)"
  "multi|f32|0|$(corr 20);(A - mean(window(A,60))) / std(window(A,60));where(A > B, delta(A,3), sign(B)) + count(window(A,7,2))"
  "multi_ld|f32|50000|$(corr 20);(A - mean(window(A,60))) / std(window(A,60));where(A > B, delta(A,3), sign(B)) + count(window(A,7,2))"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name dtype ld exprs <<<"$c"
  args=()
  IFS=';' read -ra es <<<"$exprs"
  for e in "${es[@]}"; do args+=(-e "$e"); done
  [ "$ld" != 0 ] && args+=(--ld "$ld")
  "$CLI" compile "${args[@]}" --dtype "$dtype" --arch sm_90 -o "$SRC_DIR/$name.cu" --cubin "$SRC_DIR/$name.cubin" >/dev/null
  echo "$name $(sha256sum "$SRC_DIR/$name.cu" | cut -c1-16) $(cat "$SRC_DIR/$name".cubin* | sha256sum | cut -c1-16)"
done
