/* grouped_matmul's row-tile slots, shared by its OpenCL C programs: slot s is the s-th row tile
   counting through the groups in order (ceil(size / tile) tiles each), sizes clamped to what is
   left of m. Returns the slot's group (`groups` for a surplus slot), sets *off to the group's
   first row, *size to its clamped size and *slot to the tile's index within the group. Include
   after common/clc.h. */
#ifndef EJK_GROUPED_MATMUL_SLOTS_H
#define EJK_GROUPED_MATMUL_SLOTS_H

int slot_group(const __global int* sizes, int groups, int m, int tile, int* slot, int* off, int* size) {
  int g = 0;
  *off = 0;
  *size = 0;
  for (; g < groups; ++g) {
    *size = clamp(sizes[g], 0, m - *off);
    const int tiles = EJK_CEIL_DIV(*size, tile);
    if (*slot < tiles) break;
    *slot -= tiles;
    *off += *size;
  }
  return g;
}

#endif
