/* bloomery CPU library: the IQ codebooks of iq_grids.h expanded into lookup tables (at compile
 * time), entry i's element j in byte j. */
#include "iq_grids.h"
#include "quants_impl.h"

const uint64_t bl_iq2xxs_grid[256] = {BL_IQ2XXS_GRID(BL_IQ2_ENTRY)};
const uint64_t bl_iq2xs_grid[512] = {BL_IQ2XS_GRID(BL_IQ2_ENTRY)};
const uint64_t bl_iq2s_grid[1024] = {BL_IQ2S_GRID(BL_IQ2_ENTRY)};
const uint32_t bl_iq3xxs_grid[256] = {BL_IQ3XXS_GRID(BL_IQ3XXS_ENTRY)};
const uint32_t bl_iq3s_grid[512] = {BL_IQ3S_GRID(BL_IQ3S_ENTRY)};
const uint64_t bl_iq1s_grid[2048] = {BL_IQ1S_GRID(BL_IQ1_ENTRY)};

/* every list has exactly the table's entries */
#define BL_ONE(code) +1
_Static_assert(0 BL_IQ2XXS_GRID(BL_ONE) == 256, "IQ2_XXS grid");
_Static_assert(0 BL_IQ2XS_GRID(BL_ONE) == 512, "IQ2_XS grid");
_Static_assert(0 BL_IQ2S_GRID(BL_ONE) == 1024, "IQ2_S grid");
_Static_assert(0 BL_IQ3XXS_GRID(BL_ONE) == 256, "IQ3_XXS grid");
_Static_assert(0 BL_IQ3S_GRID(BL_ONE) == 512, "IQ3_S grid");
_Static_assert(0 BL_IQ1S_GRID(BL_ONE) == 2048, "IQ1_S grid");
