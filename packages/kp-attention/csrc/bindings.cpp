// kp_attention._C: the pybind11 face of the kernels. Pointers and streams arrive as Python ints,
// sizes and strides (in elements) as 64-bit ints (docs/architecture.md). No libtorch.
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "bwd.h"
#include "bwd_tiles.h"
#include "hopper_bwd.h"
#include "fwd.h"
#include "fwd_tiles.h"
#include "hopper_fwd.h"
#include "kp/py_module.h"

namespace py = pybind11;
using kp::py_ptr;

namespace {

// A tile table (csrc/*_tiles.h, hopper_*.h) as Python sees it: {head_dim: row(tile)}.
template <class Tile, std::size_t N, class Row>
py::dict tile_dict(const Tile (&tiles)[N], Row row) {
  py::dict out;
  for (const Tile& t : tiles) out[py::int_(t.head_dim)] = row(t);
  return out;
}

// The rows of the sm80-class tables (FwdTile, BwdTile: warps) and of the Hopper ones (stages).
template <class Tile>
py::dict sm80_row(const Tile& t) {
  return py::dict(py::arg("block_m") = t.block_m, py::arg("block_n") = t.block_n, py::arg("warps") = t.warps,
                  py::arg("smem_bytes") = t.smem_bytes());
}

template <class Tile>
py::dict hopper_row(const Tile& t) {
  return py::dict(py::arg("block_m") = t.block_m, py::arg("block_n") = t.block_n, py::arg("stages") = t.stages,
                  py::arg("threads") = t.threads(), py::arg("smem_bytes") = t.smem_bytes());
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "kp-attention native CUDA kernels (the sm80-class FlashAttention-2 style forward)";
  kp::add_common(m, kp_attention::probe_kernel());

  m.def(
      "attention_fwd",
      [](uintptr_t q, int64_t q_batch, int64_t q_row, int64_t q_head, uintptr_t k, int64_t k_batch, int64_t k_row,
         int64_t k_head, uintptr_t v, int64_t v_batch, int64_t v_row, int64_t v_head, uintptr_t out, uintptr_t lse,
         uintptr_t cu_q, uintptr_t cu_k, int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t total_q,
         int64_t heads_q, int64_t heads_kv, int64_t head_dim, double scale, bool causal, int64_t left,
         int64_t right, double softcap, int64_t diagonal, int dtype, int device, uintptr_t stream) {
        kp_attention::FwdArgs a{py_ptr(q), py_ptr(k), py_ptr(v), py_ptr<void*>(out), py_ptr<float*>(lse),
                                py_ptr<const int*>(cu_q), py_ptr<const int*>(cu_k),
                                q_batch, q_row, q_head, k_batch, k_row, k_head, v_batch, v_row, v_head,
                                batch, seqlen_q, seqlen_k, total_q, heads_q, heads_kv, head_dim,
                                scale, causal, left, right, softcap, diagonal, dtype};
        kp_attention::attention_fwd(a, device, kp::py_stream(stream));
      },
      py::arg("q"), py::arg("q_batch"), py::arg("q_row"), py::arg("q_head"), py::arg("k"), py::arg("k_batch"),
      py::arg("k_row"), py::arg("k_head"), py::arg("v"), py::arg("v_batch"), py::arg("v_row"), py::arg("v_head"),
      py::arg("out"), py::arg("lse"), py::arg("cu_q"), py::arg("cu_k"), py::arg("batch"), py::arg("seqlen_q"),
      py::arg("seqlen_k"), py::arg("total_q"), py::arg("heads_q"), py::arg("heads_kv"), py::arg("head_dim"),
      py::arg("scale"), py::arg("causal"), py::arg("left"), py::arg("right"), py::arg("softcap"),
      py::arg("diagonal"), py::arg("dtype"), py::arg("device"), py::arg("stream"),
      "out [.., heads_q, head_dim] (contiguous) and lse fp32 of softmax(scale q k^T) v over the keys each row sees. "
      "Batched (cu_q = cu_k = 0): q [batch, seqlen_q, heads_q, d], k, v [batch, seqlen_k, heads_kv, d] at the "
      "given (batch, row, head) strides, lse [batch, heads_q, seqlen_q]; varlen: [total, heads, d] rows with int32 "
      "offsets cu_q / cu_k [batch + 1], seqlen_q / seqlen_k the longest sequences, lse [heads_q, total_q]. "
      "causal: key j <= i + diagonal (varlen: len_k - len_q per sequence); window left / right (-1: unbounded); "
      "softcap > 0: s = softcap tanh(scale q.k / softcap)");
  m.def("fwd_device_problem", &kp_attention::fwd_device_problem, py::arg("device"),
        "'' when the device can run the forward kernels (sm_80 or newer), else why not");
  m.def(
      "fwd_kernel",
      [](int device, int head_dim) { return std::string(kp_attention::fwd_kernel_name(device, head_dim)); },
      py::arg("device"), py::arg("head_dim"),
      "which forward kernel a call on this device at this head dim takes: 'sm90' (the Hopper TMA / wgmma "
      "kernel, csrc/hopper_fwd.h) or 'sm80' (TMA's per-call stride rules aside)");
  m.def("set_force_sm80_fwd", &kp_attention::set_force_sm80_fwd, py::arg("on"),
        "True: every forward call takes the sm80 kernel (tests and benchmarks comparing the two; also "
        "KP_ATTENTION_FWD_KERNEL=sm80 at import)");
  m.def(
      "hopper_fwd_tiles",
      [] { return tile_dict(kp_attention::kHopperTiles, hopper_row<kp_attention::HopperTile>); },
      "the Hopper forward's tile of each head dim (csrc/hopper_fwd.h): {head_dim: {block_m, block_n, stages, "
      "threads, smem_bytes}}");
  m.def(
      "bwd_kernel",
      [](int device, int head_dim) { return std::string(kp_attention::bwd_kernel_name(device, head_dim)); },
      py::arg("device"), py::arg("head_dim"),
      "which backward a call with atomics (deterministic=False) on this device at this head dim takes: 'sm90' "
      "(the Hopper TMA / wgmma kernel, csrc/hopper_bwd.h) or 'sm80'; deterministic calls take 'sm80'");
  m.def(
      "hopper_bwd_tiles",
      [] { return tile_dict(kp_attention::kHopperBwdTiles, hopper_row<kp_attention::HopperBwdTile>); },
      "the Hopper backward's tile of each head dim (csrc/hopper_bwd.h): {head_dim: {block_m, block_n, stages, "
      "threads, smem_bytes}}");
  m.def(
      "fwd_tiles",
      [] { return tile_dict(kp_attention::kFwdTiles, sm80_row<kp_attention::FwdTile>); },
      "the forward's tile of each head dim (csrc/fwd_tiles.h): {head_dim: {block_m, block_n, warps, smem_bytes}}");

  // The backward (csrc/bwd*.cu): FlashAttention-2 style, sm_80 instructions.
  m.def(
      "attention_bwd",
      [](uintptr_t q, int64_t q_batch, int64_t q_row, int64_t q_head, uintptr_t k, int64_t k_batch, int64_t k_row,
         int64_t k_head, uintptr_t v, int64_t v_batch, int64_t v_row, int64_t v_head, uintptr_t out, uintptr_t dout,
         int64_t do_batch, int64_t do_row, int64_t do_head, uintptr_t lse, uintptr_t delta, uintptr_t dq_accum,
         uintptr_t dkv_accum, uintptr_t dq, uintptr_t dk, uintptr_t dv, uintptr_t cu_q, uintptr_t cu_k, int64_t batch,
         int64_t seqlen_q,
         int64_t seqlen_k, int64_t total_q, int64_t total_k, int64_t heads_q, int64_t heads_kv, int64_t head_dim,
         double scale, bool causal, int64_t left, int64_t right, double softcap, int64_t diagonal, int dtype,
         int device, uintptr_t stream) {
        kp_attention::BwdArgs a{py_ptr(q), py_ptr(k), py_ptr(v), py_ptr(out), py_ptr(dout), py_ptr<const float*>(lse),
                                py_ptr<float*>(delta), py_ptr<float*>(dq_accum), py_ptr<float*>(dkv_accum),
                                py_ptr<void*>(dq),
                                py_ptr<void*>(dk), py_ptr<void*>(dv), py_ptr<const int*>(cu_q),
                                py_ptr<const int*>(cu_k), q_batch, q_row, q_head, k_batch, k_row, k_head, v_batch,
                                v_row, v_head, do_batch, do_row, do_head, batch, seqlen_q, seqlen_k, total_q,
                                total_k, heads_q, heads_kv, head_dim, scale, causal, left, right, softcap, diagonal,
                                dtype};
        kp_attention::attention_bwd(a, device, kp::py_stream(stream));
      },
      py::arg("q"), py::arg("q_batch"), py::arg("q_row"), py::arg("q_head"), py::arg("k"), py::arg("k_batch"),
      py::arg("k_row"), py::arg("k_head"), py::arg("v"), py::arg("v_batch"), py::arg("v_row"), py::arg("v_head"),
      py::arg("out"), py::arg("dout"), py::arg("do_batch"), py::arg("do_row"), py::arg("do_head"), py::arg("lse"),
      py::arg("delta"), py::arg("dq_accum"), py::arg("dkv_accum"), py::arg("dq"), py::arg("dk"), py::arg("dv"),
      py::arg("cu_q"),
      py::arg("cu_k"), py::arg("batch"), py::arg("seqlen_q"), py::arg("seqlen_k"), py::arg("total_q"),
      py::arg("total_k"), py::arg("heads_q"), py::arg("heads_kv"), py::arg("head_dim"), py::arg("scale"),
      py::arg("causal"), py::arg("left"), py::arg("right"), py::arg("softcap"), py::arg("diagonal"), py::arg("dtype"),
      py::arg("device"), py::arg("stream"),
      "dq, dk, dv (contiguous, written whole; dk, dv summed over a GQA group) of attention_fwd's call, from its out "
      "and lse and grad_output dout (any strides, unit last). Scratch: delta fp32 like lse; dq_accum fp32 like dq "
      "(atomics), or 0 for the deterministic dq kernel; dkv_accum fp32 of 2 dk's elements (GQA with atomics: the "
      "Hopper kernel's split of a group over CTAs) or 0");
  m.def("bwd_device_problem", &kp_attention::bwd_device_problem, py::arg("device"), py::arg("head_dim"),
        "'' when the device can run the backward kernels of head_dim (sm_80 or newer, enough shared memory), "
        "else why not");
  m.def(
      "bwd_tiles",
      [] {
        return tile_dict(kp_attention::kBwdTiles, [](const kp_attention::BwdTile& t) {
          py::dict row = sm80_row(t);
          row["dq_block_m"] = t.dq_block_m;
          row["dq_block_n"] = t.dq_block_n;
          row["dq_smem_bytes"] = t.dq_smem_bytes();
          return row;
        });
      },
      "the backward's tiles (csrc/bwd_tiles.h): {head_dim: {block_m, block_n, warps, smem_bytes, dq_block_m, ...}}");
}
