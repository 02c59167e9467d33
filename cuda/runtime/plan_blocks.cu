// bloomery CUDA library: the plan's checks of the blocks with many tensors (ctx.cu make_plan): a tensor's
// presence and shape, a latent attention block's (MLA) and a delta-net block's shapes and the sizes
// they add to the context's buffers. No device: bl_cuda_check runs them too.
#include "ctx.h"

int64_t cu_plan_need(const bl_tensor &t, int64_t bi, const char *what) {
  if (!t.data) return cu_fail(BL_E_INVAL, "block %lld: %s is missing", (long long)bi, what);
  return BL_OK;
}
int64_t cu_plan_shape(const bl_tensor &t, int64_t bi, const char *what, int64_t ne0, int64_t ne1) {
  if (t.ne[0] != ne0 || t.ne[1] != ne1)
    return cu_fail(BL_E_INVAL, "block %lld: %s is %lld x %lld, expected %lld x %lld", (long long)bi, what, (long long)t.ne[0],
                   (long long)t.ne[1], (long long)ne0, (long long)ne1);
  return BL_OK;
}

// A latent attention block's shapes (bloomery.h's MLA tensors) and the sizes it adds.
int64_t cu_plan_mla(const cu_fblock &b, int64_t i, cu_dims &d) {
  const bl_tensor *t = b.t;
  const int64_t E = d.E, nh = b.n_head, kvl = b.kv_lora, nope = b.nope, nr = b.n_rot, vd = b.v_dim, ql = b.q_lora;
  const int64_t qh = nope + nr, dk = kvl + nr;
  if (nh <= 0 || kvl <= 0 || nope <= 0 || vd <= 0 || nr < 0 || nr % 2 || nope % 4 || vd % 4 || ql % 4)
    return cu_fail(BL_E_INVAL, "block %lld: bad latent attention (heads %lld, latent %lld, nope %lld, rope %lld, v %lld)", (long long)i, (long long)nh,
                   (long long)kvl, (long long)nope, (long long)nr, (long long)vd);
  if (!cu_mla_supported((int)kvl, (int)dk)) return cu_fail(BL_E_UNSUPPORTED, "block %lld: a latent of %lld in rows of %lld has no CUDA kernel", (long long)i, (long long)kvl, (long long)dk);
  if (b.layer < 0 || b.layer > 65535) return cu_fail(BL_E_INVAL, "block %lld: KV layer %lld out of range", (long long)i, (long long)b.layer);
  if (d.kv_width && dk != d.kv_width) return cu_fail(BL_E_UNSUPPORTED, "block %lld: KV width %lld differs from other layers' %lld", (long long)i, (long long)dk, (long long)d.kv_width);
  d.kv_width = dk;
  if (b.layer + 1 > d.kv_layers) d.kv_layers = b.layer + 1;
  if (ql) {
    CU_OK(cu_plan_shape(t[CU_MLA_Q_A], i, "attn_q_a", E, ql));
    CU_OK(cu_plan_need(t[CU_MLA_Q_B], i, "attn_q_b"));
    CU_OK(cu_plan_shape(t[CU_MLA_Q_B], i, "attn_q_b", ql, nh * qh));
    if (t[CU_MLA_Q_A_NORM].data && t[CU_MLA_Q_A_NORM].ne[0] != ql) return cu_fail(BL_E_INVAL, "block %lld: q_a norm of %lld elements", (long long)i, (long long)t[CU_MLA_Q_A_NORM].ne[0]);
  } else {
    CU_OK(cu_plan_need(t[CU_MLA_Q], i, "attn_q"));
    CU_OK(cu_plan_shape(t[CU_MLA_Q], i, "attn_q", E, nh * qh));
  }
  const char *nm[4] = {"attn_kv_a_mqa", "attn_k_b", "attn_v_b", "attn_output"};
  const int rl[4] = {CU_MLA_KV_A, CU_MLA_K_B, CU_MLA_V_B, CU_MLA_O};
  for (int k = 0; k < 4; k++) CU_OK(cu_plan_need(t[rl[k]], i, nm[k]));
  CU_OK(cu_plan_shape(t[CU_MLA_KV_A], i, "attn_kv_a_mqa", E, dk));
  CU_OK(cu_plan_shape(t[CU_MLA_K_B], i, "attn_k_b", nope, kvl));
  CU_OK(cu_plan_shape(t[CU_MLA_V_B], i, "attn_v_b", kvl, vd));
  if (t[CU_MLA_K_B].ne[2] != nh || t[CU_MLA_V_B].ne[2] != nh) return cu_fail(BL_E_INVAL, "block %lld: k_b / v_b hold %lld / %lld heads, not %lld", (long long)i, (long long)t[CU_MLA_K_B].ne[2], (long long)t[CU_MLA_V_B].ne[2], (long long)nh);
  CU_OK(cu_plan_shape(t[CU_MLA_O], i, "attn_output", nh * vd, E));
  if (t[CU_MLA_KV_A_NORM].data && t[CU_MLA_KV_A_NORM].ne[0] != kvl) return cu_fail(BL_E_INVAL, "block %lld: kv_a norm of %lld elements", (long long)i, (long long)t[CU_MLA_KV_A_NORM].ne[0]);
  // the work buffers the block borrows: q (the query heads; V heads in att), k (the [latent | rope]
  // rows), v (q_a's rows)
  const int64_t qw = nh * qh > nh * vd ? nh * qh : nh * vd, kw = dk > ql ? dk : ql;
  d.qd = d.qd > qw ? d.qd : qw;
  d.kd = d.kd > kw ? d.kd : kw;
  d.mla_q = d.mla_q > nh * dk ? d.mla_q : nh * dk;
  d.mla_lat = d.mla_lat > nh * kvl ? d.mla_lat : nh * kvl;
  d.mla_nh = d.mla_nh > nh ? d.mla_nh : nh;
  d.mla_kvl = d.mla_kvl > kvl ? d.mla_kvl : kvl;
  if (nh > d.max_nh) d.max_nh = nh;
  return BL_OK;
}

// A delta-net block's shapes (bloomery.h's BL_DN_* tensors) and the sizes it adds.
int64_t cu_plan_dn(const cu_fblock &b, int64_t i, cu_dims &d) {
  const bl_tensor *t = b.t;
  const int64_t E = d.E, nk = b.n_k_heads, nv = b.n_v_heads, hk = b.head_k, hv = b.head_v, K = b.conv_kernel;
  if (nk <= 0 || nv <= 0 || nv % nk || !cu_dn_supported((int)hk, (int)hv, (int)K) || !(b.dn_eps > 0))
    return cu_fail(BL_E_INVAL, "block %lld: bad delta-net (%lld k heads of %lld, %lld v heads of %lld, %lld taps)", (long long)i, (long long)nk, (long long)hk,
                   (long long)nv, (long long)hv, (long long)K);
  if (b.layer < 0 || b.layer > 65535) return cu_fail(BL_E_INVAL, "block %lld: recurrent state layer %lld out of range", (long long)i, (long long)b.layer);
  const int64_t qk = nk * hk, vd = nv * hv, C = 2 * qk + vd;
  if (t[CU_DN_QKVZ].data) {
    if (t[CU_DN_QKV].data || t[CU_DN_GATE].data) return cu_fail(BL_E_INVAL, "block %lld: both qkvz and qkv / gate", (long long)i);
    CU_OK(cu_plan_shape(t[CU_DN_QKVZ], i, "ssm_in", E, C + vd));
  } else {
    CU_OK(cu_plan_need(t[CU_DN_QKV], i, "attn_qkv"));
    CU_OK(cu_plan_need(t[CU_DN_GATE], i, "attn_gate"));
    CU_OK(cu_plan_shape(t[CU_DN_QKV], i, "attn_qkv", E, C));
    CU_OK(cu_plan_shape(t[CU_DN_GATE], i, "attn_gate", E, vd));
  }
  if (t[CU_DN_BA].data) {
    if (t[CU_DN_BETA].data || t[CU_DN_ALPHA].data) return cu_fail(BL_E_INVAL, "block %lld: both ba and beta / alpha", (long long)i);
    CU_OK(cu_plan_shape(t[CU_DN_BA], i, "ssm_ba", E, 2 * nv));
  } else {
    CU_OK(cu_plan_need(t[CU_DN_BETA], i, "ssm_beta"));
    CU_OK(cu_plan_need(t[CU_DN_ALPHA], i, "ssm_alpha"));
    CU_OK(cu_plan_shape(t[CU_DN_BETA], i, "ssm_beta", E, nv));
    CU_OK(cu_plan_shape(t[CU_DN_ALPHA], i, "ssm_alpha", E, nv));
  }
  CU_OK(cu_plan_need(t[CU_DN_OUT], i, "ssm_out"));
  CU_OK(cu_plan_shape(t[CU_DN_OUT], i, "ssm_out", vd, E));
  const char *vn[4] = {"ssm_conv1d", "ssm_dt", "ssm_a", "ssm_norm"};
  const int vr[4] = {CU_DN_CONV, CU_DN_DT, CU_DN_A, CU_DN_ONORM};
  const int64_t vl[4] = {K * C, nv, nv, hv};
  for (int k = 0; k < 4; k++) {
    const bl_tensor &v = t[vr[k]];
    CU_OK(cu_plan_need(v, i, vn[k]));
    const int64_t n = v.ne[0] * (v.ne[1] > 1 ? v.ne[1] : 1) * (v.ne[2] > 1 ? v.ne[2] : 1) * (v.ne[3] > 1 ? v.ne[3] : 1);
    if (n != vl[k]) return cu_fail(BL_E_INVAL, "block %lld: %s of %lld elements, %lld expected", (long long)i, vn[k], (long long)n, (long long)vl[k]);
  }
  if (t[CU_DN_CONV].ne[0] != K || t[CU_DN_CONV].nb1 != K * (t[CU_DN_CONV].type == T_F32 ? 4 : 2))
    return cu_fail(BL_E_INVAL, "block %lld: ssm_conv1d's rows are not %lld contiguous taps", (long long)i, (long long)K);
  d.n_dn++;
  if (b.layer + 1 > d.dn_layers) d.dn_layers = b.layer + 1;
  const int64_t need_f = (K - 1) * C + nv * hv * hk;
  if (need_f > d.dn_rs_need) d.dn_rs_need = need_f;
  if (C > d.dn_c) d.dn_c = C;
  if (C + vd > d.dn_cz) d.dn_cz = C + vd;
  if (vd > d.dn_vd) d.dn_vd = vd;
  if (nv > d.dn_nv) d.dn_nv = nv;
  return BL_OK;
}
