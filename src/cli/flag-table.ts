// The bloomery-serve flag table: every llama-server flag (llama.cpp common/arg.cpp), grouped as llama prints them.

import { COMMON_FLAGS } from "./flag-table-common.ts";
import { SAMPLING_FLAGS } from "./flag-table-sampling.ts";
import { SERVER_SPECIFIC_FLAGS } from "./flag-table-server.ts";
import { SPEC_FLAGS } from "./flag-table-spec.ts";
import type { FlagTable } from "./flag-types.ts";

export const SERVER_FLAG_TABLE: FlagTable = {
  program: "bloomery-serve",
  groups: [
    { id: "common", title: "common params" },
    { id: "sampling", title: "sampling params" },
    { id: "spec", title: "speculative params" },
    { id: "server", title: "server-specific params" },
  ],
  flags: [...COMMON_FLAGS, ...SAMPLING_FLAGS, ...SPEC_FLAGS, ...SERVER_SPECIFIC_FLAGS],
};
