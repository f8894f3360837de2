; The simulator's GPU kernels, in LLVM IR for the NVPTX back end.
;
; This file is the source of kernels.ptx, which the binary embeds and hands
; to the CUDA driver (cuModuleLoadData JIT-compiles it for the GPU at hand).
; Regenerate the PTX after any change, with LLVM 14 or newer:
;
;   llc-14 -O3 -march=nvptx64 -mcpu=sm_75 -mattr=+ptx70 \
;       megatron-train-sim/src/device/kernels.ll \
;       -o megatron-train-sim/src/device/kernels.ptx
;
; sm_75 / PTX ISA 7.0: the oldest GPU generation CUDA 13 still supports, and
; a PTX version every driver since CUDA 11.0 can JIT; newer GPUs (sm_80,
; sm_90, ...) run it through the driver's JIT.
;
; matmul_f32 is this CUDA C, written out by hand (no clang here):
;
;   #define T 16
;   extern "C" __global__ void matmul_f32(const float *a, const float *b, float *c,
;       int M, int N, int K, int sai, int sap, int sbp, int sbj, int accumulate) {
;     __shared__ float As[T * T], Bs[T * T];
;     int tx = threadIdx.x, ty = threadIdx.y;
;     int row = blockIdx.y * T + ty, col = blockIdx.x * T + tx;
;     float sum = 0.0f;
;     for (int t = 0; t < K; t += T) {
;       As[ty * T + tx] = (row < M && t + tx < K) ? a[(long)row * sai + (long)(t + tx) * sap] : 0.0f;
;       Bs[ty * T + tx] = (t + ty < K && col < N) ? b[(long)(t + ty) * sbp + (long)col * sbj] : 0.0f;
;       __syncthreads();
;       for (int q = 0; q < T; ++q) sum = fmaf(As[ty * T + q], Bs[q * T + tx], sum);
;       __syncthreads();
;     }
;     if (row < M && col < N) {
;       long o = (long)row * N + col;
;       c[o] = accumulate ? c[o] + sum : sum;
;     }
;   }
;
; C (M x N, row-major) = A (M x K) * B (K x N) [+ C when accumulate != 0],
; with A(i, p) = a[i * sai + p * sap] and B(p, j) = b[p * sbp + j * sbj], so
; one kernel serves a * b, a^T * b and a * b^T. Launch with 16 x 16 blocks
; and a grid of ceil(N / 16) x ceil(M / 16).

target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

@As = internal addrspace(3) global [256 x float] undef, align 4
@Bs = internal addrspace(3) global [256 x float] undef, align 4

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.y()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()
declare void @llvm.nvvm.barrier0()
declare float @llvm.fma.f32(float, float, float)

define void @matmul_f32(float* %a, float* %b, float* %c, i32 %M, i32 %N, i32 %K, i32 %sai, i32 %sap, i32 %sbp, i32 %sbj, i32 %accumulate) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ty = call i32 @llvm.nvvm.read.ptx.sreg.tid.y()
  %bx = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %by = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()
  %by16 = shl i32 %by, 4
  %row = add i32 %by16, %ty
  %bx16 = shl i32 %bx, 4
  %col = add i32 %bx16, %tx
  %row_ok = icmp slt i32 %row, %M
  %col_ok = icmp slt i32 %col, %N
  %ty16 = shl i32 %ty, 4
  %slot = add i32 %ty16, %tx
  %slot64 = zext i32 %slot to i64
  %as_slot = getelementptr [256 x float], [256 x float] addrspace(3)* @As, i64 0, i64 %slot64
  %bs_slot = getelementptr [256 x float], [256 x float] addrspace(3)* @Bs, i64 0, i64 %slot64
  %row64 = sext i32 %row to i64
  %col64 = sext i32 %col to i64
  %sai64 = sext i32 %sai to i64
  %sap64 = sext i32 %sap to i64
  %sbp64 = sext i32 %sbp to i64
  %sbj64 = sext i32 %sbj to i64
  %arow = mul i64 %row64, %sai64
  %bcol = mul i64 %col64, %sbj64
  %has_tiles = icmp sgt i32 %K, 0
  br i1 %has_tiles, label %tile, label %store

tile:
  %t = phi i32 [ 0, %entry ], [ %t_next, %tile_end ]
  %sum = phi float [ 0.0, %entry ], [ %s2, %tile_end ]
  %pa = add i32 %t, %tx
  %pa_ok = icmp slt i32 %pa, %K
  %a_ok = and i1 %row_ok, %pa_ok
  br i1 %a_ok, label %load_a, label %a_done

load_a:
  %pa64 = sext i32 %pa to i64
  %paoff = mul i64 %pa64, %sap64
  %aidx = add i64 %arow, %paoff
  %aptr = getelementptr float, float* %a, i64 %aidx
  %av = load float, float* %aptr, align 4
  br label %a_done

a_done:
  %aval = phi float [ 0.0, %tile ], [ %av, %load_a ]
  store float %aval, float addrspace(3)* %as_slot, align 4
  %pb = add i32 %t, %ty
  %pb_ok = icmp slt i32 %pb, %K
  %b_ok = and i1 %pb_ok, %col_ok
  br i1 %b_ok, label %load_b, label %b_done

load_b:
  %pb64 = sext i32 %pb to i64
  %pboff = mul i64 %pb64, %sbp64
  %bidx = add i64 %pboff, %bcol
  %bptr = getelementptr float, float* %b, i64 %bidx
  %bv = load float, float* %bptr, align 4
  br label %b_done

b_done:
  %bval = phi float [ 0.0, %a_done ], [ %bv, %load_b ]
  store float %bval, float addrspace(3)* %bs_slot, align 4
  call void @llvm.nvvm.barrier0()
  br label %inner

inner:
  %q = phi i32 [ 0, %b_done ], [ %q_next, %inner ]
  %partial = phi float [ %sum, %b_done ], [ %s2, %inner ]
  %ai = add i32 %ty16, %q
  %ai64 = zext i32 %ai to i64
  %ap = getelementptr [256 x float], [256 x float] addrspace(3)* @As, i64 0, i64 %ai64
  %x = load float, float addrspace(3)* %ap, align 4
  %q16 = shl i32 %q, 4
  %bi = add i32 %q16, %tx
  %bi64 = zext i32 %bi to i64
  %bp = getelementptr [256 x float], [256 x float] addrspace(3)* @Bs, i64 0, i64 %bi64
  %y = load float, float addrspace(3)* %bp, align 4
  %s2 = call float @llvm.fma.f32(float %x, float %y, float %partial)
  %q_next = add i32 %q, 1
  %q_done = icmp eq i32 %q_next, 16
  br i1 %q_done, label %tile_end, label %inner

tile_end:
  call void @llvm.nvvm.barrier0()
  %t_next = add i32 %t, 16
  %more = icmp slt i32 %t_next, %K
  br i1 %more, label %tile, label %store

store:
  %total = phi float [ 0.0, %entry ], [ %s2, %tile_end ]
  %out_ok = and i1 %row_ok, %col_ok
  br i1 %out_ok, label %write, label %exit

write:
  %N64 = sext i32 %N to i64
  %orow = mul i64 %row64, %N64
  %oidx = add i64 %orow, %col64
  %cptr = getelementptr float, float* %c, i64 %oidx
  %acc = icmp ne i32 %accumulate, 0
  br i1 %acc, label %add_old, label %put

add_old:
  %old = load float, float* %cptr, align 4
  %new = fadd float %old, %total
  br label %put

put:
  %v = phi float [ %total, %write ], [ %new, %add_old ]
  store float %v, float* %cptr, align 4
  br label %exit

exit:
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{void (float*, float*, float*, i32, i32, i32, i32, i32, i32, i32, i32)* @matmul_f32, !"kernel", i32 1}
