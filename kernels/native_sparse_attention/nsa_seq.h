// native_sparse_attention's OpenCL C programs (nsa.cl, nsa_mma.cl): the sequence of a flattened
// token. Include after common/clc.h.
#ifndef EJK_NSA_SEQ_H
#define EJK_NSA_SEQ_H

// The sequence of flattened token t: the last n with cu[n] <= t (empty sequences skipped),
// returned, with its bounds.
int locate(const __global int* cu, int nseq, int t, int* bos, int* eos) {
  int lo = 0, hi = nseq;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (cu[mid] <= t) lo = mid;
    else hi = mid;
  }
  *bos = cu[lo];
  *eos = cu[lo + 1];
  return lo;
}

#endif
