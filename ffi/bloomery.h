/* bloomery native ABI: the one C header every native library (CPU, CUDA, Metal) implements
 * and the ffi/ TypeScript bindings reach through bun:ffi. Every entry point returns a status (BL_OK = 0) or a
 * value documented as such; the message of the last failure on this thread is bl_last_error().
 * Structs passed across the ABI are made of 8-byte slots only (int64_t, double, pointers),
 * so TypeScript lays them out by slot index (ffi/layout.ts) without padding rules. */
#ifndef BLOOMERY_H
#define BLOOMERY_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BL_ABI_VERSION 1

enum bl_status {
  BL_OK = 0,
  BL_E_INVAL = 1,       /* a bad argument (message says which) */
  BL_E_IO = 2,          /* a file could not be opened, read or mapped */
  BL_E_NOMEM = 3,       /* an allocation failed */
  BL_E_UNSUPPORTED = 4, /* a type or feature this library does not implement */
  BL_E_DEVICE = 5       /* a GPU runtime error */
};

int64_t bl_abi_version(void);
const char *bl_last_error(void);

/* ---- file mapping (weights are read through these, never copied into JavaScript) ---- */
/* Map a whole file read-only. *base receives the address, *size the length. */
int64_t bl_map_file(const char *path, uint64_t *base, uint64_t *size);
int64_t bl_unmap_file(uint64_t base, uint64_t size);
/* Copy len bytes at base+off into dst (bounds are the caller's mapping). */
int64_t bl_copy_bytes(uint64_t src, void *dst, uint64_t len);
/* A file range read into anonymous memory that asks for 2 MiB huge pages (hugecopy.c): *out is
 * its 2 MiB-aligned address; bl_huge_free(*out, len) unmaps it. bl_huge_available: whether the kernel
 * gives huge pages to a region that asks; bl_huge_backed: the bytes of a range backed by them now. */
int64_t bl_huge_copy(const char *path, uint64_t off, uint64_t len, int64_t nthreads, uint64_t *out);
int64_t bl_huge_free(uint64_t base, uint64_t len);
int64_t bl_huge_available(void);
int64_t bl_huge_backed(uint64_t base, uint64_t len);

/* ---- quant blocks ---- */
/* block_elems and block_bytes of a ggml type id; BL_E_UNSUPPORTED when unknown. */
int64_t bl_type_size(int64_t type, int64_t *block_elems, int64_t *block_bytes);
/* Reference (scalar) dequantization of n elements (n a multiple of the block). */
int64_t bl_dequantize(int64_t type, const void *src, float *dst, int64_t n);
/* Reference quantization of n floats into type (for the GGUF writer and activations). */
int64_t bl_quantize(int64_t type, const float *src, void *dst, int64_t n);
/* Dot products of `rows` rows of a weight matrix (type, row length n, row stride in bytes)
 * with one f32 vector x, converting x to the type's activation format as ggml does. */
int64_t bl_matvec_ref(int64_t type, const void *w, int64_t row_stride, int64_t rows,
                      const float *x, int64_t n, float *y);
/* Random blocks of `type` (block indices first_block.., n_blocks of them) with small finite
 * scales giving weights of about weight_std; deterministic in (seed, block index). flags
 * BL_SYNTH_CENTERED: Q4_K and Q5_K blocks of zero mean (each sub-block's minimum cancels its
 * scale's offset), where plain random ones share a positive offset. */
#define BL_SYNTH_CENTERED 1
int64_t bl_synth_fill(int64_t type, void *dst, int64_t first_block, int64_t n_blocks, uint64_t seed, double weight_std, int64_t flags);

/* ---- the model program (CPU backend; the GPU backends take the same program) ----
 * A model family file (src/models/) describes the forward pass as a list of coarse
 * blocks; the backend executes the list for a batch of tokens. */

/* A weight tensor: data address (mapped file or device memory), ggml type, dims (ne[0]
 * contiguous), byte stride between rows (ne[1]) and between slabs (ne[2], experts). */
typedef struct bl_tensor {
  uint64_t data;
  int64_t type;
  int64_t ne[4];
  int64_t nb1;
  int64_t nb2;
} bl_tensor; /* 8 slots */

enum bl_block_kind {
  BL_BLOCK_EMBED = 1,  /* x = token_embd[tokens]                                  t: 0 tok_embd */
  BL_BLOCK_ATTN = 2,   /* x += attention(rmsnorm(x)), KV cache layer `layer`      t: see BL_ATTN_* */
  BL_BLOCK_MOE = 3,    /* x += routed experts(rmsnorm(x))                         t: see BL_MOE_* */
  BL_BLOCK_FFN = 4,    /* x += down(silu(gate h) * up h), h = rmsnorm(x)          t: 0 norm 1 gate 2 up 3 down */
  BL_BLOCK_OUTPUT = 5  /* logits[out rows] = output(rmsnorm(x))                   t: 0 norm 1 output */
};
enum { BL_ATTN_NORM = 0, BL_ATTN_Q = 1, BL_ATTN_K = 2, BL_ATTN_V = 3, BL_ATTN_O = 4,
       BL_ATTN_Q_NORM = 5, BL_ATTN_K_NORM = 6, BL_ATTN_BQ = 7, BL_ATTN_BK = 8, BL_ATTN_BV = 9 };
enum { BL_MOE_NORM = 0, BL_MOE_GATE_INP = 1, BL_MOE_GATE = 2, BL_MOE_UP = 3, BL_MOE_DOWN = 4 };
enum { BL_ROPE_NORMAL = 0, BL_ROPE_NEOX = 2 };
enum { BL_HOST_EXPERTS_RAM = 1, BL_HOST_EXPERTS_DISK = 2 };
enum { BL_GATING_SOFTMAX = 0 };

#define BL_BLOCK_TENSORS 12
typedef struct bl_block {
  int64_t kind;
  int64_t layer;        /* KV cache layer (attention blocks) */
  int64_t n_head, n_head_kv, head_dim, n_rot, rope_type;
  int64_t n_expert, n_expert_used, norm_topk, gating;
  int64_t yarn_orig_ctx;
  double eps, rope_base, rope_freq_scale, attn_scale;
  double yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
  double expert_weights_scale;
  uint64_t expert_store;  /* MoE blocks: a bl_expert_store_new handle holding the routed experts (0: the tensors' data) */
  int64_t expert_layer;   /* MoE blocks: the layer of that store */
  int64_t host_experts;   /* MoE blocks run by a card (BL_HOST_EXPERTS_*): 0 on the card; RAM = the routed
                           * experts stay in host memory (the card's step hands the block to the CPU hook,
                           * uploads them for a batch, reads a share of a token's picks in place, promotes
                           * hot ones); DISK = they are read from the files on demand through expert_store
                           * (the NVMe tier): the CPU hook runs the block for every batch, and the card
                           * never uploads, pins, reads or promotes them (their data is not read) */
  bl_tensor t[BL_BLOCK_TENSORS]; /* by role; data == 0 when absent */
} bl_block; /* 24 + 12*8 = 120 slots */

typedef struct bl_program {
  int64_t n_blocks;
  uint64_t blocks;      /* bl_block[n_blocks] */
  int64_t n_embd, n_vocab;
} bl_program;

/* A batch: token ids, positions and sequence (slot) of each token; rows whose logits are
 * wanted (indices into the batch) and where to write them (n_out * n_vocab floats). */
typedef struct bl_batch {
  int64_t n_tokens;
  uint64_t tokens, pos, seq; /* int32_t[n_tokens] each */
  int64_t n_out;
  uint64_t out_rows;         /* int32_t[n_out] */
  uint64_t logits;           /* float[n_out * n_vocab] */
} bl_batch;

typedef struct bl_ctx_params {
  int64_t n_embd, n_vocab;
  int64_t max_tokens;   /* largest batch forward() takes */
  int64_t n_threads;
  int64_t kv_layers, kv_slots, kv_ctx; /* KV cache: layers x slots x positions */
  int64_t kv_k_dim, kv_v_dim;          /* per position: n_head_kv * head_dim */
  int64_t max_q_dim;                   /* n_head * head_dim */
  int64_t max_ff;                      /* largest FFN / expert hidden size */
  int64_t max_experts;
  int64_t flags;                       /* BL_CTX_* */
} bl_ctx_params;
/* BL_CTX_EXACT: activations stay f32 and weights are dequantized for every product (a slow
 * reference path, to tell numerics from bugs); the default converts activations as ggml does. */
enum { BL_CTX_EXACT = 1 };

/* ---- the host hook: a card's step runs one block on the CPU ----
 * x: n_tok residual rows (n_embd floats each, host memory) of the block's input; the block's
 * output is added to them (rmsnorm, router and experts as bl_cpu_forward computes them). The
 * context needs max_tokens >= n_tok (its KV cache is not used). err: a message on failure. Both
 * hooks read the experts of a block with expert_store set through that store (required when
 * host_experts is BL_HOST_EXPERTS_DISK), the same bits as from the tensors' data. */
typedef int64_t (*bl_block_rows_fn)(uint64_t ctx, const bl_block *b, int64_t n_tok, float *x, char *err, int64_t err_len);
int64_t bl_cpu_block_rows(uint64_t ctx, const bl_block *b, int64_t n_tok, float *x, char *err, int64_t err_len);
/* The experts of a MoE block for picks the caller made: k of a token (sel / selw, n_tok x k, the
 * weights as given; a pick of -1 is none: computed elsewhere); out[n_tok x n_embd] = their
 * weighted sum on rmsnorm(x) (x is not changed). */
typedef int64_t (*bl_expert_rows_fn)(uint64_t ctx, const bl_block *b, int64_t n_tok, const float *x, const int32_t *sel,
                                     const float *selw, int64_t k, float *out, char *err, int64_t err_len);
int64_t bl_cpu_expert_rows(uint64_t ctx, const bl_block *b, int64_t n_tok, const float *x, const int32_t *sel, const float *selw,
                           int64_t k, float *out, char *err, int64_t err_len);
/* on: the threads that call the context's forwards and hooks stay pinned to its first core between
 * calls (a card's callback thread: no affinity change per call); off: pinned during a call only. */
int64_t bl_cpu_ctx_keep_pin(uint64_t ctx, int64_t on);
/* out[0] = the address of bl_cpu_block_rows, out[1] that of bl_cpu_expert_rows (for bl_cuda_set_host). */
int64_t bl_cpu_block_rows_fn(uint64_t *out);

/* ---- CPU kernel paths, threads and probes (CPU library) ----
 * The kernels run on one path: "scalar" (the reference), "avx2" (AVX2+FMA+F16C) or "avx512"
 * (F/BW/VL/DQ + VNNI), chosen at run time from cpuid; BLOOMERY_CPU_PATH forces one. */
const char *bl_cpu_path_name(void);
/* Bit p set when this CPU runs path p (0 scalar, 1 avx2, 2 avx512). */
int64_t bl_cpu_paths(void);
/* Use path `name` from now on (BL_E_UNSUPPORTED when this CPU lacks it). */
int64_t bl_cpu_set_path(const char *name);
/* BL_E_UNSUPPORTED (saying why) when BLOOMERY_CPU_PATH names no path or one this CPU lacks. */
int64_t bl_cpu_path_check(void);
/* Cores this process may use: its allowed CPUs, capped by the cgroup's CPU quota. */
int64_t bl_cpu_usable_cores(void);
/* Threads for one-token steps (llama's -t) and for batches (-tb), each clamped to the usable
 * cores; the pool is pinned to those cores. bl_cpu_ctx_new starts n_threads for both. */
int64_t bl_cpu_ctx_set_threads(uint64_t ctx, int64_t n_threads, int64_t n_threads_batch);
int64_t bl_cpu_ctx_threads(uint64_t ctx, int64_t *n_threads, int64_t *n_threads_batch);
/* One path's kernels alone, for tests (path NULL or "" = the active path): convert n floats to
 * an activation type; y[i][r] = W row r . x row i with x converted as the path does; the float
 * helpers (op 0 dot_f32, 1 dot_f16, 2 axpy_f16, 3 to_f16, 4 round_f16, 5 swiglu, 6 exp_sum,
 * 7 axpy_f32, 8 scale_f32; scalar results in *r). */
int64_t bl_kernel_quantize(const char *path, int64_t act_type, const float *x, void *dst, int64_t n);
int64_t bl_kernel_matmul(const char *path, int64_t type, const void *w, int64_t row_stride, int64_t rows,
                         const float *x, int64_t n_x, int64_t n, float *y);
int64_t bl_kernel_float(const char *path, int64_t op, float a, const void *x, void *y, int64_t n, double *r);
/* A path's tile on `rows` weight rows against na (1..8) activation rows, on n_threads pinned
 * threads taking tile_rows rows at a time: the best of `reps` passes in ns (microbenchmarks). */
int64_t bl_kernel_bench(const char *path, int64_t type, const void *w, int64_t ws, int64_t rows, int64_t n, int64_t na,
                        int64_t tile_rows, int64_t n_threads, int64_t reps, double *best_ns);
/* ---- the expert store (CPU library): routed experts read from the GGUF files on demand ----
 * A fixed RAM capacity of slots, one slot a unit (the gate, up and down slabs of one (layer,
 * expert)), least recently used out first, filled with pread (O_DIRECT where the file system takes
 * it, else normal reads and posix_fadvise DONTNEED). A MoE block whose expert_store is set loads
 * the experts its batch uses into slots before its products (in parallel on the pool, in rounds
 * when one layer's experts outnumber the slots) and reads them there; a background reader
 * prefetches the experts the next layer used in the previous step. Read errors are BL_E_IO from
 * the forward, naming the file and offset. Free the store after every context that used it. */
typedef struct bl_expert_layer {
  int64_t n_expert;
  int64_t file[3];       /* gate, up, down: index into the params' files */
  int64_t offset[3];     /* absolute file offset of expert 0's slab */
  int64_t slab_bytes[3]; /* bytes one expert's slab takes (the tensor's nb2) */
} bl_expert_layer; /* 10 slots */
typedef struct bl_expert_store_params {
  int64_t capacity_bytes; /* RAM for slots; at least n_expert_used slots (bl_expert_store_sizes) */
  int64_t n_files;
  uint64_t files;         /* const char *[n_files]: the GGUF files (a split set has several) */
  int64_t n_layers;
  uint64_t layers;        /* bl_expert_layer[n_layers]: the store's layers (a block's expert_layer) */
  int64_t n_expert_used;  /* experts a token uses (the minimum is that many slots) */
  int64_t flags;          /* BL_XS_NO_DIRECT: normal reads only; BL_XS_NO_PREFETCH: no background reader */
} bl_expert_store_params; /* 7 slots */
enum { BL_XS_NO_DIRECT = 1, BL_XS_NO_PREFETCH = 2 };
/* Counters of bl_expert_store_stats, by index: lookups (an expert a block needed), hits, misses
 * (read by the block), bytes read by the blocks (payload: misses x unit bytes), evictions,
 * prefetch hits (a prefetched unit the next block used), prefetch reads and bytes, slots, bytes a
 * slot, slots holding a unit, files read with O_DIRECT, failed reads. */
enum { BL_XS_LOOKUPS = 0, BL_XS_HITS, BL_XS_MISSES, BL_XS_BYTES_READ, BL_XS_EVICTIONS, BL_XS_PREFETCH_HITS,
       BL_XS_PREFETCH_READS, BL_XS_PREFETCH_BYTES, BL_XS_SLOTS, BL_XS_SLOT_BYTES, BL_XS_RESIDENT, BL_XS_DIRECT_FILES,
       BL_XS_READ_ERRORS, BL_XS_STATS };
/* The smallest capacity these params take, the bytes of a slot and the units of all layers (no I/O). */
int64_t bl_expert_store_sizes(const bl_expert_store_params *p, int64_t *min_bytes, int64_t *slot_bytes, int64_t *units);
/* A store (BL_E_INVAL naming the sizes when the capacity is below the minimum; BL_E_IO when a file
 * cannot be opened or does not hold the experts). Slots beyond every unit are not allocated. */
int64_t bl_expert_store_new(const bl_expert_store_params *p, uint64_t *out_store);
int64_t bl_expert_store_free(uint64_t store);
/* out[0..n): the counters above (indices past BL_XS_STATS get 0). */
int64_t bl_expert_store_stats(uint64_t store, int64_t *out, int64_t n);
/* Map every page of a read-only mapping up front (llama's MAP_POPULATE): no page faults later. */
int64_t bl_prefault(uint64_t base, uint64_t size);
/* Memory read bandwidth: n_threads pinned threads read a buffer of `bytes` `reps` times; the
 * best rate in GB/s (1e9 bytes) in *gbps. */
int64_t bl_membw(int64_t n_threads, int64_t bytes, int64_t reps, double *gbps);

int64_t bl_cpu_ctx_new(const bl_ctx_params *p, uint64_t *out_ctx);
int64_t bl_cpu_ctx_free(uint64_t ctx);
int64_t bl_cpu_forward(uint64_t ctx, const bl_program *prog, const bl_batch *batch);
/* Forget positions >= from of a slot's sequence (they will be overwritten). */
int64_t bl_cpu_kv_clear(uint64_t ctx, int64_t slot, int64_t from);
/* Copy n positions of slot src's KV to slot dst (prefix sharing between slots). */
int64_t bl_cpu_kv_copy(uint64_t ctx, int64_t src, int64_t dst, int64_t n);
/* Bytes one position takes across all layers (k and v), and save/restore of n positions. The
 * saved layout is position-major, so the first m*pos_bytes bytes of a state are a state of m. */
int64_t bl_cpu_kv_pos_bytes(uint64_t ctx);
int64_t bl_cpu_kv_save(uint64_t ctx, int64_t slot, int64_t n, void *dst);
int64_t bl_cpu_kv_load(uint64_t ctx, int64_t slot, int64_t n, const void *src);
/* RoPE of a block's settings on n_heads vectors of hd floats at position pos (for tests). */
int64_t bl_rope_apply_block(const bl_block *b, float *v, int64_t n_heads, int64_t hd, int64_t pos);

/* ---- sampling ----
 * The vocabulary-wide part of a sampling step (src/sampling/ runs the chain on the candidates).
 * Ops act on the logits row in order, as llama.cpp's samplers do, without writing the row:
 *   ADD      logit[id] += value (logit bias; -inf bans)
 *   BAN      logit[id] = -inf (values unused)
 *   PENALTY  for each id with count value > 0: logit /= a when positive, *= a otherwise, then
 *            -= count * b + c (repeat a, frequency b, presence c)
 *   NSIGMA   logits below max - a * std of the finite logits become -inf (a <= 0: no-op)
 * Then the best k tokens in (logit desc, id asc) order go to out_ids / out_logits (n_out = min(k,
 * n_vocab)); with want_stats, stats = {max, count of finite logits, Z1 = sum exp(l - max),
 * S1 = sum exp(l - max) * (l - max), Zs = sum exp(s (l - max)), Ss = sum exp(s (l - max)) * s (l - max)}
 * with s = scale, over the whole adjusted row. NaN or +inf logits are an error. */
enum { BL_SAMPLE_OP_ADD = 1, BL_SAMPLE_OP_BAN = 2, BL_SAMPLE_OP_PENALTY = 3, BL_SAMPLE_OP_NSIGMA = 4 };

typedef struct bl_sample_op {
  int64_t kind;
  int64_t n;        /* entries in ids / values */
  uint64_t ids;     /* const int32_t[n], each in [0, n_vocab) */
  uint64_t values;  /* const float[n] */
  double a, b, c;
} bl_sample_op; /* 7 slots */

typedef struct bl_sample_args {
  uint64_t logits;     /* const float[n_vocab] */
  int64_t n_vocab;
  uint64_t ops;        /* const bl_sample_op[n_ops] */
  int64_t n_ops;
  int64_t k;
  uint64_t out_ids;    /* int32_t[k] */
  uint64_t out_logits; /* float[k] */
  int64_t want_stats;
  double scale;
  int64_t n_out;       /* out */
  double stats[6];     /* out */
} bl_sample_args; /* 16 slots */

int64_t bl_sample_candidates(bl_sample_args *args);
/* The first index of the largest logit (NaN or +inf: an error). */
int64_t bl_sample_argmax(const float *logits, int64_t n_vocab, int64_t *out_id);

/* ---- CUDA (libbloomery_cuda.so) ----
 * The same model program on one NVIDIA card. The library loads without a driver or a GPU;
 * nothing touches the GPU before an entry point is called, every entry point returns a status,
 * and bl_cuda_last_error() is the message of the last failure on this thread. A context copies
 * every tensor the program names to the card when it is made (from the program's host
 * addresses: the mapped GGUF); the program's memory is not needed afterwards. */
typedef struct bl_cuda_device {
  int64_t index, cc_major, cc_minor, sm_count;
  int64_t total_bytes, free_bytes;
  int64_t driver_version, runtime_version; /* 1000 * major + 10 * minor */
  int64_t l2_bytes, smem_optin;
  int64_t has_code;                        /* this build carries code the card runs */
  char name[96];
} bl_cuda_device; /* 23 slots */

int64_t bl_cuda_abi_version(void);
const char *bl_cuda_last_error(void);
/* The driver is present and new enough: *n_devices CUDA devices. BL_E_DEVICE when there is no
 * driver or no device, BL_E_UNSUPPORTED when the driver is too old (the message says which). */
int64_t bl_cuda_probe(int64_t *n_devices, int64_t *driver_version);
int64_t bl_cuda_device_info(int64_t dev, bl_cuda_device *out);
/* Bytes the program's weights take on the card (each distinct tensor once) and the bytes a context
 * of these parameters adds (KV cache, work buffers); validates the program, needs no device. */
int64_t bl_cuda_plan_bytes(const bl_ctx_params *p, const bl_program *prog, int64_t *weight_bytes, int64_t *ctx_bytes);
/* The program's tensors uploaded to device dev (BL_E_NOMEM naming the sizes when they do not fit
 * its free memory). Contexts made from the weights share them; free the weights after them. */
int64_t bl_cuda_weights_new(int64_t dev, const bl_program *prog, uint64_t *out_weights);
int64_t bl_cuda_weights_free(uint64_t weights);
/* A context (KV cache, buffers) for the weights' program; BL_E_NOMEM naming the sizes when it
 * does not fit beside them. */
int64_t bl_cuda_ctx_new(uint64_t weights, const bl_ctx_params *p, uint64_t *out_ctx);
int64_t bl_cuda_ctx_free(uint64_t ctx);
int64_t bl_cuda_forward(uint64_t ctx, const bl_batch *batch);
/* A forward that returns, for each output row, its k best logits (value desc, id asc) in
 * vals[n_out * k] / ids[n_out * k] instead of the logits (batch->logits is not used); k in 1..64. */
int64_t bl_cuda_forward_topk(uint64_t ctx, const bl_batch *batch, int64_t k, int32_t *ids, float *vals);
int64_t bl_cuda_kv_clear(uint64_t ctx, int64_t slot, int64_t from);
int64_t bl_cuda_kv_copy(uint64_t ctx, int64_t src, int64_t dst, int64_t n);
int64_t bl_cuda_kv_pos_bytes(uint64_t ctx);
int64_t bl_cuda_kv_save(uint64_t ctx, int64_t slot, int64_t n, void *dst);
int64_t bl_cuda_kv_load(uint64_t ctx, int64_t slot, int64_t n, const void *src);
/* Saved states on the card (the prompt cache's card tier): a slot's first n positions copied into a
 * device buffer of their own (*out, a handle; BL_E_NOMEM when the card has no room), restored (the
 * first n positions of it) into a slot, freed. */
int64_t bl_cuda_kv_stash(uint64_t ctx, int64_t slot, int64_t n, uint64_t *out);
int64_t bl_cuda_kv_unstash(uint64_t ctx, uint64_t stash, int64_t slot, int64_t n);
int64_t bl_cuda_kv_stash_free(uint64_t ctx, uint64_t stash);
/* The card's free memory now (bytes). */
int64_t bl_cuda_free_bytes(uint64_t ctx, int64_t *out);
/* GRAPHS: 1 (default) replays decode steps as captured CUDA graphs, 0 launches every kernel;
 * PREFILL_MIN: batches of at least this many tokens take the tensor-core path (default 9);
 * MAX_SPLITS: most slices of the context one decode attention head is split into (1..32). */
enum { BL_CUDA_OPT_GRAPHS = 1, BL_CUDA_OPT_PREFILL_MIN = 2, BL_CUDA_OPT_MAX_SPLITS = 3 };
int64_t bl_cuda_set_option(uint64_t ctx, int64_t key, int64_t value);
/* The host hook for the program's blocks with host_experts (bl_block_rows_fn and bl_expert_rows_fn of
 * the CPU library and its context, max_tokens at least the card context's). Without it a step over
 * such a block fails. Batches of at least the upload threshold take the card's kernels on the block's
 * experts copied over PCIe for the step (two layers in flight); smaller ones call the hook. One-token
 * steps may split a token's picks: the card copies its share of the experts from host memory over
 * PCIe (or reads them in place) while the CPU computes the rest (BL_CUDA_OPT card share, cuda/ctx.h
 * CU_OPT_CARD_SHARE; without one asked for, the share moves online by the steps' own timings). */
int64_t bl_cuda_set_host(uint64_t ctx, uint64_t fn, uint64_t cpu_ctx, uint64_t expert_fn);
/* out[0..n): host blocks run by the hook, blocks run from uploads, bytes uploaded, hook microseconds,
 * the upload threshold (tokens), PCIe bytes a second measured, host experts pinned (1/0), the hook's
 * measured nanoseconds a (token, expert) pair, the card's share of a token's picks, promotion's slots a
 * layer, experts moved, picks found resident and all picks of the promoted one-token steps, whether
 * the card copies its share into card memory first (1/0), and the share's sizing's nanoseconds: a
 * pick on the CPU, a pick of the card's copy, a CPU call's fixed part (0: not sized); then the
 * counters CudaBackend.hostStats() names (26 in all; the last three: the share's online moves, the splits whose timings it read, and the uploads found copied ahead by the step before). */
int64_t bl_cuda_host_stats(uint64_t ctx, int64_t *out, int64_t n);
/* The online sizing's rule (cuda/share_tune.cu; pure arithmetic, no card needed): the next card share
 * of K picks from a window's means in microseconds - the card's share from post to wait, its wait
 * for the CPU, the CPU's call - with the card's time a pick when its share is 0 and the CPU path's
 * latency beyond its call. Moves by one at most; the CPU keeps one pick. */
int64_t bl_cuda_share_decide(int64_t k, int64_t share, double card_us, double wait_us, double cpu_us, double pick_us, double lat_us);
/* out[0..n): weight bytes, KV bytes, steps, steps replayed from graphs, graphs held, SM count, decode
 * batches' expert combines fused into the next layer's row quantization, and attention output
 * products that took the rows' int8 slots the attention wrote (FAST_ATTX8) (both counted as enqueued),
 * then the fast paths' launch counters in the order CudaBackend.stats() names them (25 in all). */
int64_t bl_cuda_ctx_stats(uint64_t ctx, int64_t *out, int64_t n);
/* Tests: y[i][r] = W row r . x row i (n_x rows of n floats) on device dev, W `rows` rows of type
 * stored as row_stride-byte rows; path 0 the decode product, 1 and 2 the tensor-core tiles
 * (64 and 32 rows of x a tile; n a multiple of 128), 3 the one-token product on int8 activations,
 * 4..7 the decode-batch product (2..8 rows; int8 activations for Q4_K / Q6_K) with the rows
 * quantized once a launch (4, 6) or by each block (5, 7), 6 and 7 of the rows RMS-normalised first
 * (eps 1e-6, weight of element i 0.75 + 0.0625 * (i % 9)). Outputs are poisoned before the run. */
int64_t bl_cuda_test_matmul(int64_t dev, int64_t path, int64_t type, const void *w, int64_t row_stride, int64_t rows,
                            const float *x, int64_t n_x, int64_t n, float *y);
/* Tests: n elements (whole blocks) of type dequantized on the card. */
int64_t bl_cuda_test_dequant(int64_t dev, int64_t type, const void *src, int64_t n, float *dst);
/* Probe: microseconds a kernel for n small kernels back to back, as one graph and as stream
 * launches. mode bit 0: every other kernel takes 64 KiB of dynamic shared memory; bit 1: both
 * prefer the largest shared-memory carveout; bit 2: programmatic dependent launch. */
int64_t bl_cuda_test_launch(int64_t dev, int64_t n, int64_t mode, double *graph_us, double *stream_us);

#ifdef __cplusplus
}
#endif
#endif
