/* One SGD step of LuCA + cosine classifier + cross-entropy + L1 for G configurations, fused.

   The same arithmetic as tosca_heads/engine/kernels.py (LucaStep) followed by optim.py
   (GroupSGD), written as a few passes over each [b, d] activation instead of ~100 separate
   PyTorch operations. On a CPU a step's matmuls are tiny (48 x 768 x 48), so the element-wise
   work and its per-operation overhead cost more than the matmuls; here the matmuls go to the BLAS
   PyTorch links (its sgemm_, passed in as a function pointer, checked by native.py against
   torch's own product when the library loads) and everything else is a handful of vectorisable
   loops.

   Layout conventions (row-major, as the Python engine): weights are kept transposed against
   nn.Linear (down.weight is [d, r]), bottlenecks are zero-padded to the group's largest r and s
   (padding stays exactly 0: GELU(0) = ReLU(0) = 0 and the outgoing weights are 0). Where each
   parameter sits in a configuration's flat vector is the layout spec's (engine/layout.py):
   native.py generates tosca_slots.h from it at build time.
   Compiled on first use by tosca_heads/engine/native.py; no Python headers needed. */

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "tosca_slots.h" /* TOSCA_SLOTS(X), TOSCA_SLOT_NAMES: generated from engine/layout.py */

/* The calling convention between this library and native.py: bumped with any change of the
   structs below or of an exported function's signature; native.py checks it, the structs' sizes
   and the slot names every time it loads the library. */
#define TOSCA_ABI_VERSION 4

typedef int (*set_threads_fn)(int); /* MKL_Set_Num_Threads_Local, or NULL */
/* Fortran's sgemm_: every argument by reference, and the two CHARACTER arguments' lengths passed
   as hidden trailing arguments (gfortran's convention; C implementations of BLAS ignore them). */
typedef void (*sgemm_fn)(const char *, const char *, const int *, const int *, const int *,
                         const float *, const float *, const int *, const float *, const int *,
                         const float *, float *, const int *, size_t, size_t);

enum { FLOW_TOSCA = 0, FLOW_TOSCA_R = 1, FLOW_ADAPTER = 2, FLOW_CALIBRATOR = 3 };

/* Where each parameter starts in a configuration's flat vector; -1 where the flow has none. The
   members are the layout spec's slots, in its order; the step below computes exactly these. */
typedef struct {
#define TOSCA_SLOT_MEMBER(field) int64_t field;
    TOSCA_SLOTS(TOSCA_SLOT_MEMBER)
#undef TOSCA_SLOT_MEMBER
} Slots;
_Static_assert(sizeof(Slots) == 8 * sizeof(int64_t),
               "the layout spec holds other slots than the step computes (down, up, norm, cal_down, cal_up)");

/* Mirrors the ctypes Structure in native.py field by field. */
typedef struct {
    int64_t groups, batch, dim, r, s, classes, flow, track, threads;
    int64_t param_size;
    Slots off;
    const float *features; /* [n, d] this epoch's training features */
    const int64_t *targets; /* [n] class ids */
    const int64_t *index;   /* [G, index_stride]: the rows of this step (tosca_step) or epoch */
    int64_t index_stride;
    float *flat, *grad_flat, *buf_flat;       /* [G, P] */
    float *weight, *grad_weight, *buf_weight; /* [G, C, d] */
    float *sigma, *grad_sigma, *buf_sigma;    /* [G] */
    const float *neg_lr, *momentum, *decay, *l1; /* [G] */
    double *epoch_ce;   /* [G] += each step's mean CE loss * b */
    double *epoch_l1;   /* [G] += each step's L1 term (l1 * |theta|_1 after its update) * b */
    int64_t *correct;   /* [G] += correct predictions, when track */
    float *work;        /* tosca_workspace_floats() floats */
    sgemm_fn gemm;
    set_threads_fn blas_threads; /* the helper thread sets its BLAS to one thread with it */
} StepArgs;

/* The module outputs of many rows (evaluation, prototypes): no gradient, no update. */
typedef struct {
    int64_t groups, rows, dim, r, s, flow, normalize; /* normalize: unit rows, as F.normalize */
    int64_t param_size;
    Slots off;
    const float *params; /* [G, P] */
    const float *x;      /* [rows, d], shared by every configuration */
    float *out;          /* [G, rows, d]: configuration g's rows start at out + g * out_stride */
    int64_t out_stride;
    float *work;         /* tosca_forward_workspace_floats() floats */
    sgemm_fn gemm;
} ForwardArgs;

static const float LN_EPS = 1e-5f;
static const float NORM_EPS = 1e-12f;

/* Row-major C[m, n] = op(A)[m, k] @ op(B)[k, n] + beta C through column-major sgemm (C^T = B^T A^T).
   ta: A is stored [k, m]; tb: B is stored [n, k]. lda/ldb/ldc are the stored row lengths. */
static void matmul(sgemm_fn gemm, int ta, int tb, int m, int n, int k, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
    const char opa = ta ? 'T' : 'N', opb = tb ? 'T' : 'N';
    const float alpha = 1.0f;
    if (m == 0 || n == 0) return;
    gemm(&opb, &opa, &n, &m, &k, &alpha, B, &ldb, A, &lda, &beta, C, &ldc, 1, 1);
}

/* exp(x) to about 1 ulp, branch-free so that loops calling it vectorise (Cody-Waite reduction,
   degree-6 polynomial); flushes below -87.3 to 0 and clamps above 88.7 (about 3.3e38). */
static inline float fast_exp(float x) {
    x = x < -104.0f ? -104.0f : (x > 88.7f ? 88.7f : x);
    /* round to nearest by the 1.5 * 2^23 trick (no call, so the loop vectorises) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    /* 2^n in two halves keeps n + 127 inside the exponent range for n down to -151 */
    int32_t ni = (int32_t)n;
    int32_t half = ni >> 1;
    union { int32_t i; float f; } s1, s2;
    s1.i = (half + 127) << 23;
    s2.i = (ni - half + 127) << 23;
    return p * s1.f * s2.f;
}

static inline float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

/* erf to 1.5e-7 absolute (Abramowitz & Stegun 7.1.26), branch-free so that loops vectorise;
   GELU only ever uses 1 + erf, where an absolute error of 1.5e-7 is float32 rounding. */
static inline float erf_approx(float x) {
    float ax = x < 0.0f ? -x : x;
    float t = 1.0f / (1.0f + 0.3275911f * ax);
    float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
                  0.254829592f) * t;
    float y = 1.0f - poly * fast_exp(-ax * ax);
    return x < 0.0f ? -y : y;
}

/* exact (erf) GELU and its derivative, as F.gelu / ATen's gelu_backward */
static inline float gelu(float h) { return h * 0.5f * (1.0f + erf_approx(h * (float)M_SQRT1_2)); }
static inline float gelu_grad(float h) {
    const float beta = (float)(M_2_SQRTPI * M_SQRT1_2 * 0.5);
    float cdf = 0.5f * (1.0f + erf_approx(h * (float)M_SQRT1_2));
    float pdf = fast_exp(-0.5f * h * h) * beta;
    return cdf + h * pdf;
}


/* Scratch is carved from one workspace by the same functions that size it: `take` on a carver
   without a base only counts (tosca_workspace_floats, tosca_forward_workspace_floats), with a base
   it hands out the buffers in the same order (step_one, tosca_forward). */
typedef struct {
    float *base; /* NULL: only count */
    int64_t used;
} Carver;

static float *take(Carver *c, int64_t count) {
    float *out = c->base ? c->base + c->used : NULL;
    c->used += (count + 15) & ~(int64_t)15; /* 64-byte steps keep every buffer aligned alike */
    return out;
}

/* x / max(|x|, eps) per row of [rows, d]; keeps |x| and the denominator for the backward */
static void normalize_rows(const float *x, float *unit, float *norm, float *denom, int rows, int d) {
    for (int i = 0; i < rows; ++i) {
        const float *xi = x + (int64_t)i * d;
        float *ui = unit + (int64_t)i * d;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int j = 0; j < d; ++j) acc += xi[j] * xi[j];
        float n = sqrtf(acc), den = n > NORM_EPS ? n : NORM_EPS;
        norm[i] = n;
        denom[i] = den;
        float inv = 1.0f / den;
        for (int j = 0; j < d; ++j) ui[j] = xi[j] * inv;
    }
}

/* gradient through x / max(|x|, eps): (g - u <u, g> [|x| >= eps]) / max(|x|, eps), in place on g */
static void normalize_backward(float *g, const float *unit, const float *norm, const float *denom,
                               int rows, int d) {
    for (int i = 0; i < rows; ++i) {
        float *gi = g + (int64_t)i * d;
        const float *ui = unit + (int64_t)i * d;
        float along = 0.0f;
#pragma omp simd reduction(+ : along)
        for (int j = 0; j < d; ++j) along += ui[j] * gi[j];
        float a = norm[i] < NORM_EPS ? 0.0f : along, inv = 1.0f / denom[i];
        for (int j = 0; j < d; ++j) gi[j] = (gi[j] - ui[j] * a) * inv;
    }
}

/* Momentum SGD with L1 (sign) and weight decay, as GroupSGD (d = g + l1 sign(p) + wd p;
   buf = m buf + d; p += neg_lr buf); returns sum |p| after the update. */
static float sgd(float *restrict p, const float *restrict g, float *restrict buf, int64_t n,
                 float neg_lr, float momentum, float decay, float l1) {
    float l1_norm = 0.0f;
#pragma omp simd reduction(+ : l1_norm)
    for (int64_t k = 0; k < n; ++k) {
        float pk = p[k];
        float sign = pk > 0.0f ? 1.0f : (pk < 0.0f ? -1.0f : 0.0f);
        float d = g[k] + sign * l1;
        d = d + pk * decay;
        float b = buf[k] * momentum + d;
        buf[k] = b;
        pk = pk + b * neg_lr;
        p[k] = pk;
        l1_norm += pk < 0.0f ? -pk : pk;
    }
    return l1_norm;
}

/* What the forward keeps for the backward, each [b, ...] */
typedef struct {
    float *h, *a, *u, *zhat, *z, *rstd, *q, *gate;
} Acts;

static Acts take_acts(Carver *c, int b, int d, int R, int S) {
    Acts t;
    t.h = take(c, (int64_t)b * R);
    t.a = take(c, (int64_t)b * R);
    t.u = take(c, (int64_t)b * d);
    t.zhat = take(c, (int64_t)b * d);
    t.z = take(c, (int64_t)b * d);
    t.rstd = take(c, b);
    t.q = take(c, (int64_t)b * S);
    t.gate = take(c, (int64_t)b * d);
    return t;
}

/* LuCA's output for b rows of x (method.md §3), keeping the activations in t, in four pieces:
   the adapter's matmuls, the LayerNorm of rows [lo, hi), the calibrator's matmuls, and the output
   of rows [lo, hi). Each row's numbers do not depend on the range it is computed in, so the step
   can share the row-wise pieces between its threads. */

/* h = x W1 + b1, a = GELU(h), u = a W2 (every row: the matmuls' shapes never change) */
static void adapter_matmuls(sgemm_fn gemm, const float *p, const Slots *off, int b, int d, int R,
                            const float *x, const Acts *t) {
    const float *bd = p + off->down_b;
    matmul(gemm, 0, 0, b, R, d, x, d, p + off->down_w, R, 0.0f, t->h, R);
    for (int i = 0; i < b; ++i)
        for (int j = 0; j < R; ++j) {
            float v = t->h[i * R + j] + bd[j];
            t->h[i * R + j] = v;
            t->a[i * R + j] = gelu(v);
        }
    matmul(gemm, 0, 0, b, d, R, t->a, R, p + off->up_w, d, 0.0f, t->u, d);
}

/* rows [lo, hi): u += b2 (+ x for tosca), zhat = its LayerNorm, z = gamma zhat + beta */
static void layer_norm_rows(const float *p, const Slots *off, int flow, int d, const float *x, const Acts *t,
                            int64_t lo, int64_t hi) {
    const float *bu = p + off->up_b, *gamma = p + off->norm_w, *beta = p + off->norm_b;
    for (int64_t i = lo; i < hi; ++i) {
        float *ui = t->u + i * d, *zh = t->zhat + i * d, *zi = t->z + i * d;
        const float *xi = x + i * d;
        if (flow == FLOW_TOSCA)
            for (int j = 0; j < d; ++j) ui[j] = ui[j] + bu[j] + xi[j];
        else
            for (int j = 0; j < d; ++j) ui[j] = ui[j] + bu[j];
        float s1 = 0.0f;
#pragma omp simd reduction(+ : s1)
        for (int j = 0; j < d; ++j) s1 += ui[j];
        float m = s1 / (float)d, s2 = 0.0f;
#pragma omp simd reduction(+ : s2)
        for (int j = 0; j < d; ++j) s2 += (ui[j] - m) * (ui[j] - m);
        float rs = 1.0f / sqrtf(s2 / (float)d + LN_EPS);
        t->rstd[i] = rs;
        for (int j = 0; j < d; ++j) {
            float v = (ui[j] - m) * rs;
            zh[j] = v;
            zi[j] = v * gamma[j] + beta[j];
        }
    }
}

/* q = ReLU(v V1), the gate's pre-activation q V2 (every row), v = z for tosca, else x */
static void calibrator_matmuls(sgemm_fn gemm, const float *p, const Slots *off, int flow, int b, int d,
                               int S, const float *x, const Acts *t) {
    const float *v_in = flow == FLOW_TOSCA ? t->z : x;
    matmul(gemm, 0, 0, b, S, d, v_in, d, p + off->cal_down_w, S, 0.0f, t->q, S);
    for (int64_t k = 0; k < (int64_t)b * S; ++k) t->q[k] = t->q[k] > 0.0f ? t->q[k] : 0.0f;
    matmul(gemm, 0, 0, b, d, S, t->q, S, p + off->cal_up_w, d, 0.0f, t->gate, d);
}

/* rows [lo, hi): the gate's sigmoid and the flow's output */
static void output_rows(int flow, int d, const float *x, const Acts *t, float *out, int64_t lo, int64_t hi) {
    const int64_t k0 = lo * d, k1 = hi * d;
    if (flow != FLOW_ADAPTER) {
#pragma omp simd
        for (int64_t k = k0; k < k1; ++k) t->gate[k] = sigmoid(t->gate[k]);
    }
    if (flow == FLOW_TOSCA)
        for (int64_t k = k0; k < k1; ++k) out[k] = t->z[k] * t->gate[k];
    else if (flow == FLOW_TOSCA_R)
        for (int64_t k = k0; k < k1; ++k) out[k] = t->z[k] + x[k] * t->gate[k];
    else if (flow == FLOW_ADAPTER)
        memcpy(out + k0, t->z + k0, sizeof(float) * (k1 - k0));
    else
        for (int64_t k = k0; k < k1; ++k) out[k] = x[k] * t->gate[k];
}

static void luca_forward(sgemm_fn gemm, const float *p, const Slots *off, int flow, int b, int d,
                         int R, int S, const float *x, const Acts *t, float *out) {
    if (flow != FLOW_CALIBRATOR) {
        adapter_matmuls(gemm, p, off, b, d, R, x, t);
        layer_norm_rows(p, off, flow, d, x, t, 0, b);
    }
    if (flow != FLOW_ADAPTER) calibrator_matmuls(gemm, p, off, flow, b, d, S, x, t);
    output_rows(flow, d, x, t, out, 0, b);
}

/* ---- one step, on one or two threads -------------------------------------------------------
   A step is a fixed sequence of work items: the same BLAS calls with the same shapes, the same
   loops, each row's numbers computed by the same code whatever rows share the loop, and every sum
   over rows in row order. Threads only choose who executes which item and when: with one thread
   the caller runs them all in the order written; with two, the caller (part 0) runs the chain of
   matmuls the forward and the backward pass are, and the helper (part 1) gathers the next step's
   batch, takes the second half of the rows of every row-wise piece, computes each weight
   gradient and update as soon as the chain has produced what it needs, and updates the
   classifier of one step while the next step's forward runs (it is needed only at that step's
   cosines). A part that needs another's result waits for the stage the other posts after
   producing it, so two threads give one thread's numbers bit for bit, by construction, on any CPU
   and BLAS. (Splitting a matmul by rows would not: MKL rounds a row of a small product
   differently depending on how many rows are multiplied with it.) */

#define SPIN_BEFORE_YIELD 50    /* waiting for another part's stage: spins before yielding */
#define SPIN_BEFORE_SLEEP 20000 /* helper: spins between jobs before sleeping (0.1-1 ms, by CPU) */

/* The stages of one configuration's step (a "pass"), in the order they are posted; each part
   posts its own, in increasing order. Every pass counts PASS_STAGES further, so a stage never
   repeats within a job, and a pass's STAGE_END is the next pass's start. */
enum {
    STAGE_U = 1,        /* part 0: the adapter's matmuls */
    STAGE_LN = 2,       /* part 1: its LayerNorm rows */
    STAGE_W_UNIT = 3,   /* part 1: the classifier updated by the step before, and its unit rows */
    STAGE_GATE = 4,     /* part 0: the calibrator's matmuls */
    STAGE_OUT = 5,      /* part 1: its output rows, normalised */
    STAGE_COS = 6,      /* part 0: the cosines with the classifier rows */
    STAGE_CE = 7,       /* each part: its cross-entropy rows */
    STAGE_D_OUT = 8,    /* part 0: the gradient of the output rows' cosines */
    STAGE_D_C2 = 9,     /* each part: its rows of the output's and the calibrator's gradient */
    STAGE_D_C1 = 10,    /* part 0: the calibrator's hidden gradient (cal_up read for the last time) */
    STAGE_D_Z = 11,     /* part 0: the LayerNorm output's gradient (cal_down read for the last time) */
    STAGE_D_U = 12,     /* each part: its rows of the adapter's output gradient (gamma read) */
    STAGE_D_H = 13,     /* part 0: the adapter's hidden gradient (up.weight read for the last time) */
    STAGE_END = 16,     /* each part: every update of the pass (part 0: and the tallies) */
    PASS_STAGES = 16,
};

typedef struct {
    _Alignas(64) atomic_llong done; /* the last stage this part posted in the current job */
} Progress;

typedef struct {
    const StepArgs *args;
    int64_t rows, batch; /* the job's steps: batch rows at a time over rows [0, rows) of the order */
    int largest;         /* its largest step: min(batch, rows) */
    int threads;
    unsigned csr; /* the caller's floating-point control (flush-to-zero), applied by the helper */
    Progress part[2];
    float l1_slot[8]; /* each slot's sum |p| after its update, summed in the spec's order */
} StepJob;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static unsigned read_csr(void) {
#if defined(__x86_64__) || defined(__i386__)
    return _mm_getcsr();
#else
    return 0;
#endif
}

static void write_csr(unsigned csr) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(csr);
#else
    (void)csr;
#endif
}

static void post(StepJob *J, int k, int64_t stage) {
    if (J->threads > 1) atomic_store_explicit(&J->part[k].done, stage, memory_order_release);
}

/* Wait until part `other` has posted `stage`: spin briefly, then yield (on a busy machine the
   other part may be waiting for a core). */
static void await(StepJob *J, int other, int64_t stage) {
    if (J->threads == 1) return;
    for (int spins = 0; atomic_load_explicit(&J->part[other].done, memory_order_acquire) < stage; ++spins) {
        if (spins < SPIN_BEFORE_YIELD)
            cpu_relax();
        else
            sched_yield();
    }
}

static void column_sums(const float *x, float *out, int rows, int cols) {
    for (int64_t j = 0; j < cols; ++j) out[j] = 0.0f;
    for (int i = 0; i < rows; ++i) {
        const float *xi = x + (int64_t)i * cols;
        for (int64_t j = 0; j < cols; ++j) out[j] += xi[j];
    }
}

/* What one pass leaves for the next, by pass parity: its batch (the rows and their class ids), its
   unit output rows, the gradient of its logits and each row's share of sigma's gradient. */
typedef struct {
    float *x;
    int64_t *y;
    float *unit, *dlog;
    double *row_dsig;
} Carried;

/* The scratch every pass finds in the same place: sized for the job's largest step and carved
   first, the two parities of what passes carry, and the unit classifier rows. */
typedef struct {
    Carried by_parity[2];
    float *w_unit, *w_norm, *w_denom;
} Shared;

/* One pass's own scratch: the forward's activations and the backward's. */
typedef struct {
    Acts t;
    float *out, *norm, *denom, *cosv;
    float *d_out, *d_c2, *d_u, *d_c1, *d_h;
    double *row_loss;
    int64_t *row_hit;
} StepBuffers;

static Shared take_shared(Carver *c, int largest, int d, int C) {
    Shared s;
    for (int i = 0; i < 2; ++i) {
        Carried *k = &s.by_parity[i];
        k->x = take(c, (int64_t)largest * d);
        k->y = (int64_t *)take(c, 2 * (int64_t)largest);
        k->unit = take(c, (int64_t)largest * d);
        k->dlog = take(c, (int64_t)largest * C);
        k->row_dsig = (double *)take(c, 2 * (int64_t)largest);
    }
    s.w_unit = take(c, (int64_t)C * d);
    s.w_norm = take(c, C);
    s.w_denom = take(c, C);
    return s;
}

static StepBuffers take_step(Carver *c, int b, int d, int R, int S, int C) {
    StepBuffers w;
    w.t = take_acts(c, b, d, R, S);
    w.out = take(c, (int64_t)b * d);
    w.norm = take(c, b);
    w.denom = take(c, b);
    w.cosv = take(c, (int64_t)b * C);
    w.d_out = take(c, (int64_t)b * d);
    w.d_c2 = take(c, (int64_t)b * d);
    w.d_u = take(c, (int64_t)b * d);
    w.d_c1 = take(c, (int64_t)b * S);
    w.d_h = take(c, (int64_t)b * R);
    w.row_loss = (double *)take(c, 2 * (int64_t)b);
    w.row_hit = (int64_t *)take(c, 2 * (int64_t)b);
    return w;
}

/* Floats of scratch one configuration's step needs (reused across configurations and steps). */
int64_t tosca_workspace_floats(int64_t batch, int64_t dim, int64_t r, int64_t s, int64_t classes) {
    Carver count = {NULL, 0};
    take_shared(&count, (int)batch, (int)dim, (int)classes);
    take_step(&count, (int)batch, (int)dim, (int)r, (int)s, (int)classes);
    return count.used;
}

/* The cross-entropy of rows [lo, hi): each row's loss, whether its argmax is right, the gradient
   of the mean loss w.r.t. its logits (times sigma: w.r.t. its cosines) and its share of sigma's. */
static void cross_entropy_rows(const StepBuffers *w, const Carried *k, int C, int b, float sig, int64_t lo,
                               int64_t hi) {
    const float inv_b = 1.0f / (float)b;
    for (int64_t i = lo; i < hi; ++i) {
        const float *ci = w->cosv + i * C;
        float *di = k->dlog + i * C;
        const int64_t yi = k->y[i];
        float top = -INFINITY;
        int best = 0;
        for (int c = 0; c < C; ++c) {
            float l = ci[c] * sig;
            di[c] = l;
            if (l > top) top = l, best = c; /* the first largest, as argmax */
        }
        float total = 0.0f;
        for (int c = 0; c < C; ++c) total += fast_exp(di[c] - top);
        float lse = top + logf(total);
        w->row_loss[i] = -(double)(di[yi] - lse);
        w->row_hit[i] = best == yi;
        for (int c = 0; c < C; ++c) di[c] = fast_exp(di[c] - lse) * inv_b;
        di[yi] += -inv_b;
        double ds = 0.0;
        for (int c = 0; c < C; ++c) {
            ds += (double)di[c] * ci[c];
            di[c] *= sig;
        }
        k->row_dsig[i] = ds;
    }
}

/* Rows [lo, hi) of the gradient through the output's normalisation, and, with a calibrator, of
   the gradient of the gate's pre-activation (its output times the gated input). */
static void output_backward_rows(const StepBuffers *w, const Carried *k, int flow, int d, int64_t lo,
                                 int64_t hi) {
    normalize_backward(w->d_out + lo * d, k->unit + lo * d, w->norm + lo, w->denom + lo, (int)(hi - lo), d);
    if (flow == FLOW_ADAPTER) return;
    const float *mult = flow == FLOW_TOSCA ? w->t.z : k->x, *gate = w->t.gate;
    for (int64_t e = lo * d; e < hi * d; ++e) w->d_c2[e] = w->d_out[e] * mult[e] * (1.0f - gate[e]) * gate[e];
}

/* Rows [lo, hi) of the LayerNorm's backward: d_u from d_z. */
static void layer_norm_backward_rows(const StepBuffers *w, const float *gamma, const float *d_z, int d,
                                     int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
        const float *dz = d_z + i * d, *zh = w->t.zhat + i * d;
        float *du = w->d_u + i * d;
        float sg = 0.0f, sgz = 0.0f;
#pragma omp simd reduction(+ : sg, sgz)
        for (int j = 0; j < d; ++j) {
            float gj = dz[j] * gamma[j];
            du[j] = gj;
            sg += gj;
            sgz += gj * zh[j];
        }
        float mg = sg / (float)d, mgz = sgz / (float)d, rs = w->t.rstd[i];
        for (int j = 0; j < d; ++j) du[j] = (du[j] - mg - zh[j] * mgz) * rs;
    }
}

/* The gradients of the LayerNorm's gamma and beta: per feature, summed over the rows in row order. */
static void layer_norm_parameter_gradients(const StepBuffers *w, const float *d_z, float *g_gamma,
                                           float *g_beta, int b, int d) {
    for (int j = 0; j < d; ++j) g_gamma[j] = g_beta[j] = 0.0f;
    for (int64_t i = 0; i < b; ++i) {
        const float *dz = d_z + i * d, *zh = w->t.zhat + i * d;
        for (int j = 0; j < d; ++j) {
            g_gamma[j] += dz[j] * zh[j];
            g_beta[j] += dz[j];
        }
    }
}

static void gather_rows(const StepArgs *A, int64_t g, int64_t begin, int b, const Carried *k) {
    const int64_t d = A->dim, *rows = A->index + g * A->index_stride + begin;
    for (int64_t i = 0; i < b; ++i) {
        memcpy(k->x + i * d, A->features + rows[i] * d, sizeof(float) * d);
        k->y[i] = A->targets[rows[i]];
    }
}

enum { L1_CAL_UP, L1_CAL_DOWN, L1_DOWN_W, L1_DOWN_B, L1_UP_W, L1_UP_B, L1_NORM_W, L1_NORM_B };

/* Where a pass is in its job: configuration g's step over rows [begin, begin + b) of its order;
   `next_*` the pass after it (next_b = 0: none). */
typedef struct {
    int64_t g, begin, pass, next_g, next_begin;
    int b, next_b;
} Pass;

/* Step P's classifier and sigma: their gradients from the step's carried rows, and updates. */
static void update_classifier(const StepArgs *A, const Pass *P, const Shared *s) {
    const int64_t g = P->g;
    const int b = P->b, d = (int)A->dim, C = (int)A->classes;
    const Carried *k = &s->by_parity[P->pass % 2];
    const float lr = A->neg_lr[g], m = A->momentum[g], wd = A->decay[g];
    float *W = A->weight + g * (int64_t)C * d, *gW = A->grad_weight + g * (int64_t)C * d;
    float *bW = A->buf_weight + g * (int64_t)C * d;
    double d_sigma = 0.0;
    for (int i = 0; i < b; ++i) d_sigma += k->row_dsig[i]; /* every row's share, in row order */
    A->grad_sigma[g] = (float)d_sigma;
    sgd(A->sigma + g, A->grad_sigma + g, A->buf_sigma + g, 1, lr, m, wd, 0.0f);
    matmul(A->gemm, 1, 0, C, d, b, k->dlog, C, k->unit, d, 0.0f, gW, d);
    normalize_backward(gW, s->w_unit, s->w_norm, s->w_denom, C, d);
    sgd(W, gW, bW, (int64_t)C * d, lr, m, wd, 0.0f);
}

/* A pass's items, as part k (every item when the job has one thread). `before` is the pass
   before in the job (NULL for the first): with two parts, part 1 updates its classifier here. */
static void step_pass(StepJob *J, const Pass *P, const Pass *before, int k) {
    const StepArgs *A = J->args;
    const int one = J->threads == 1, main_part = one || k == 0, helper_part = one || k == 1;
    const int64_t g = P->g, base = P->pass * PASS_STAGES;
    const int b = P->b, d = (int)A->dim, R = (int)A->r, S = (int)A->s, C = (int)A->classes;
    const int flow = (int)A->flow;
    const int has_adapter = flow != FLOW_CALIBRATOR, has_calibrator = flow != FLOW_ADAPTER;
    const int64_t Psize = A->param_size;
    const sgemm_fn gemm = A->gemm;
    const Slots *off = &A->off;
    float *p = A->flat + g * Psize, *gp = A->grad_flat + g * Psize, *bp = A->buf_flat + g * Psize;
    const float *W = A->weight + g * (int64_t)C * d;
    const float lr = A->neg_lr[g], m = A->momentum[g], wd = A->decay[g], l1 = A->l1[g];
    float *l1_slot = J->l1_slot;

    Carver carver = {A->work, 0}; /* every part carves the same buffers */
    const Shared shared = take_shared(&carver, J->largest, d, C);
    const StepBuffers w = take_step(&carver, b, d, R, S, C);
    const Carried *carried = &shared.by_parity[P->pass % 2]; /* by parity, whatever the threads */
    const Acts t = w.t;
    float *x = carried->x, *unit = carried->unit;
    const float *v_in = flow == FLOW_TOSCA ? t.z : x; /* the calibrator's input */
    float *d_z = w.d_out; /* tosca_r, adapter: out = ... + LN(A(x)) */
    const int64_t half = one ? b : b / 2; /* part 0's rows of the row-wise pieces: [0, half) */
    /* with two parts, part 1 updates this pass's classifier during the next pass */
    const int deferred = !one && P->next_b > 0;

    /* A job's passes run one after another: part 1 starts once part 0 has finished the last one
       (its tallies read the scratch); part 0 starts once part 1 has, through its final wait. */
    if (!main_part) await(J, 0, base);

    if (!one && k == 1) { /* the next pass's batch, and the classifier's gradient of the pass before */
        if (P->next_b > 0) gather_rows(A, P->next_g, P->next_begin, P->next_b, &shared.by_parity[(P->pass + 1) % 2]);
        if (before) {
            const Carried *was = &shared.by_parity[before->pass % 2];
            float *gW = A->grad_weight + before->g * (int64_t)C * d;
            matmul(gemm, 1, 0, C, d, before->b, was->dlog, C, was->unit, d, 0.0f, gW, d);
            normalize_backward(gW, shared.w_unit, shared.w_norm, shared.w_denom, C, d);
        }
    }
    if (main_part) { /* the batch (gathered by part 1 in the pass before, with two parts) */
        if (one || P->pass == 0) gather_rows(A, g, P->begin, b, carried);
        if (has_adapter) adapter_matmuls(gemm, p, off, b, d, R, x, &t);
        post(J, 0, base + STAGE_U);
    }
    if (!one && k == 1) {
        await(J, 0, base + STAGE_U);
        if (has_adapter) layer_norm_rows(p, off, flow, d, x, &t, half, b);
        post(J, 1, base + STAGE_LN);
        if (before) { /* the rest of the pass before's classifier update (its gradient is above) */
            const int64_t bg = before->g;
            const Carried *was = &shared.by_parity[before->pass % 2];
            float *Wb = A->weight + bg * (int64_t)C * d, *gW = A->grad_weight + bg * (int64_t)C * d;
            double d_sigma = 0.0;
            for (int i = 0; i < before->b; ++i) d_sigma += was->row_dsig[i];
            A->grad_sigma[bg] = (float)d_sigma;
            sgd(A->sigma + bg, A->grad_sigma + bg, A->buf_sigma + bg, 1, A->neg_lr[bg], A->momentum[bg],
                A->decay[bg], 0.0f);
            sgd(Wb, gW, A->buf_weight + bg * (int64_t)C * d, (int64_t)C * d, A->neg_lr[bg], A->momentum[bg],
                A->decay[bg], 0.0f);
        }
    }
    if (helper_part) { /* the unit classifier rows (updated by the pass before) */
        normalize_rows(W, shared.w_unit, shared.w_norm, shared.w_denom, C, d);
        post(J, 1, base + STAGE_W_UNIT);
    }
    if (main_part) {
        if (has_adapter) layer_norm_rows(p, off, flow, d, x, &t, 0, half);
        await(J, 1, base + STAGE_LN);
        if (has_calibrator) calibrator_matmuls(gemm, p, off, flow, b, d, S, x, &t);
        post(J, 0, base + STAGE_GATE);
    }
    if (!one && k == 1) {
        await(J, 0, base + STAGE_GATE);
        output_rows(flow, d, x, &t, w.out, half, b);
        normalize_rows(w.out + half * d, unit + half * d, w.norm + half, w.denom + half, (int)(b - half), d);
        post(J, 1, base + STAGE_OUT);
    }
    if (main_part) { /* the output rows, normalised, and their cosines with the classifier rows */
        output_rows(flow, d, x, &t, w.out, 0, half);
        normalize_rows(w.out, unit, w.norm, w.denom, (int)half, d);
        await(J, 1, base + STAGE_OUT); /* and so the unit classifier rows and sigma */
        matmul(gemm, 0, 1, b, C, d, unit, d, shared.w_unit, d, 0.0f, w.cosv, C);
        post(J, 0, base + STAGE_COS);
    }
    const float sig = A->sigma[g]; /* read after the update of the pass before */
    if (!one && k == 1) {
        await(J, 0, base + STAGE_COS);
        cross_entropy_rows(&w, carried, C, b, sig, half, b);
        post(J, 1, base + STAGE_CE);
    }
    if (main_part) { /* the cross-entropy, and the gradient of the cosines back to the output rows */
        cross_entropy_rows(&w, carried, C, b, sig, 0, half);
        post(J, 0, base + STAGE_CE);
        await(J, 1, base + STAGE_CE);
        matmul(gemm, 0, 0, b, d, C, carried->dlog, C, shared.w_unit, d, 0.0f, w.d_out, d);
        post(J, 0, base + STAGE_D_OUT);
    }
    if (!one && k == 1) {
        await(J, 0, base + STAGE_D_OUT);
        output_backward_rows(&w, carried, flow, d, half, b);
        post(J, 1, base + STAGE_D_C2);
    }
    if (main_part) {
        output_backward_rows(&w, carried, flow, d, 0, half);
        post(J, 0, base + STAGE_D_C2);
    }
    if (helper_part && !deferred) update_classifier(A, P, &shared);
    if (helper_part && has_calibrator) {
        await(J, 0, base + STAGE_D_C2);
        matmul(gemm, 1, 0, S, d, b, t.q, S, w.d_c2, d, 0.0f, gp + off->cal_up_w, d);
    }
    if (main_part) { /* the backward chain through the calibrator */
        await(J, 1, base + STAGE_D_C2);
        if (has_calibrator) {
            matmul(gemm, 0, 1, b, S, d, w.d_c2, d, p + off->cal_up_w, d, 0.0f, w.d_c1, S);
            for (int64_t e = 0; e < (int64_t)b * S; ++e) w.d_c1[e] = t.q[e] > 0.0f ? w.d_c1[e] : 0.0f;
        }
        post(J, 0, base + STAGE_D_C1);
    }
    if (helper_part && has_calibrator) { /* cal_up: read for the last time by the chain above */
        await(J, 0, base + STAGE_D_C1);
        const int64_t up = off->cal_up_w, down = off->cal_down_w;
        l1_slot[L1_CAL_UP] = sgd(p + up, gp + up, bp + up, (int64_t)S * d, lr, m, wd, l1);
        matmul(gemm, 1, 0, d, S, b, v_in, d, w.d_c1, S, 0.0f, gp + down, S);
    }
    if (main_part) {
        if (flow == FLOW_TOSCA) {
            for (int64_t e = 0; e < (int64_t)b * d; ++e) d_z[e] = w.d_out[e] * t.gate[e];
            matmul(gemm, 0, 1, b, d, S, w.d_c1, S, p + off->cal_down_w, S, 1.0f, d_z, d);
        }
        post(J, 0, base + STAGE_D_Z);
    }
    if (!one && k == 1) { /* its rows of the LayerNorm's backward first: part 0 waits for them */
        await(J, 0, base + STAGE_D_Z);
        if (has_adapter) layer_norm_backward_rows(&w, p + off->norm_w, d_z, d, half, b);
        post(J, 1, base + STAGE_D_U);
    }
    if (main_part) { /* the backward chain through the adapter */
        if (has_adapter) layer_norm_backward_rows(&w, p + off->norm_w, d_z, d, 0, half);
        post(J, 0, base + STAGE_D_U);
        await(J, 1, base + STAGE_D_U);
        if (has_adapter) {
            matmul(gemm, 0, 1, b, R, d, w.d_u, d, p + off->up_w, d, 0.0f, w.d_h, R);
            for (int64_t e = 0; e < (int64_t)b * R; ++e) w.d_h[e] *= gelu_grad(t.h[e]);
        }
        post(J, 0, base + STAGE_D_H);
    }
    if (helper_part && has_calibrator) { /* cal_down: read for the last time by the chain above */
        await(J, 0, base + STAGE_D_Z);
        const int64_t down = off->cal_down_w;
        l1_slot[L1_CAL_DOWN] = sgd(p + down, gp + down, bp + down, (int64_t)d * S, lr, m, wd, l1);
    }
    if (helper_part && has_adapter) { /* the adapter's second layer and the LayerNorm */
        await(J, 0, base + STAGE_D_U);
        const int64_t up = off->up_w, up_b = off->up_b, nw = off->norm_w, nb = off->norm_b;
        layer_norm_parameter_gradients(&w, d_z, gp + nw, gp + nb, b, d);
        column_sums(w.d_u, gp + up_b, b, d);
        matmul(gemm, 1, 0, R, d, b, t.a, R, w.d_u, d, 0.0f, gp + up, d);
        await(J, 0, base + STAGE_D_H);
        l1_slot[L1_UP_W] = sgd(p + up, gp + up, bp + up, (int64_t)R * d, lr, m, wd, l1);
        l1_slot[L1_UP_B] = sgd(p + up_b, gp + up_b, bp + up_b, d, lr, m, wd, l1);
        l1_slot[L1_NORM_W] = sgd(p + nw, gp + nw, bp + nw, d, lr, m, wd, l1);
        l1_slot[L1_NORM_B] = sgd(p + nb, gp + nb, bp + nb, d, lr, m, wd, l1);
    }
    if (helper_part) post(J, 1, base + STAGE_END);
    if (main_part) { /* the adapter's first layer, then the pass's tallies */
        if (has_adapter) {
            const int64_t down = off->down_w, down_b = off->down_b;
            column_sums(w.d_h, gp + down_b, b, R);
            matmul(gemm, 1, 0, d, R, b, x, d, w.d_h, R, 0.0f, gp + down, R);
            l1_slot[L1_DOWN_W] = sgd(p + down, gp + down, bp + down, (int64_t)d * R, lr, m, wd, l1);
            l1_slot[L1_DOWN_B] = sgd(p + down_b, gp + down_b, bp + down_b, R, lr, m, wd, l1);
        }
        await(J, 1, base + STAGE_END);
        float l1_norm = 0.0f; /* the spec's order: calibrator, then adapter */
        if (has_calibrator) l1_norm += l1_slot[L1_CAL_UP], l1_norm += l1_slot[L1_CAL_DOWN];
        if (has_adapter)
            for (int slot = L1_DOWN_W; slot <= L1_NORM_B; ++slot) l1_norm += l1_slot[slot];
        double loss = 0.0, total_l1 = 0.0;
        int64_t hits = 0;
        for (int i = 0; i < b; ++i) loss += w.row_loss[i], hits += w.row_hit[i];
        total_l1 += l1_norm;
        loss /= b;
        A->epoch_ce[g] += loss * b;
        A->epoch_l1[g] += (double)l1 * total_l1 * b;
        if (A->track) {
            A->correct[g] += hits;
        }
        post(J, 0, base + STAGE_END);
    }
}

/* Every step of the job, each over every configuration, as part k. What the job holds is read
   into locals first: after part 0's last wait the caller may return and post the next job, so
   part 1 must not look at this one again once it has posted its last stage. */
static void run_job(StepJob *J, int k) {
    const int64_t groups = J->args->groups, rows = J->rows, batch = J->batch;
    int64_t pass = 0;
    Pass before = {0};
    for (int64_t begin = 0; begin < rows; begin += batch) {
        const int b = (int)(rows - begin < batch ? rows - begin : batch);
        for (int64_t g = 0; g < groups; ++g) {
            Pass P = {.g = g, .begin = begin, .pass = pass++, .b = b};
            if (g + 1 < groups) {
                P.next_g = g + 1, P.next_begin = begin, P.next_b = b;
            } else if (begin + batch < rows) {
                const int64_t next = begin + batch;
                P.next_g = 0, P.next_begin = next;
                P.next_b = (int)(rows - next < batch ? rows - next : batch);
            }
            step_pass(J, &P, P.pass > 0 ? &before : NULL, k);
            before = P;
        }
    }
}

/* The helper thread and the one job it shares with the caller (static: a helper may still be
   leaving its last stage when the caller returns). Jobs of one process are serialised by `busy`;
   a job that finds it taken runs on one thread (the same numbers). */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    atomic_long generation;
    atomic_int sleeping;
    atomic_flag busy;
    int started; /* 1: running, -1: could not start */
    StepJob job;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, ATOMIC_FLAG_INIT, 0, {0}};

static void *helper_main(void *start) {
    long seen = (long)(intptr_t)start; /* the jobs posted before it existed are not its own */
    int blas_single = 0;
    for (;;) {
        long now = atomic_load(&pool.generation);
        for (int spins = 0; now == seen && spins < SPIN_BEFORE_SLEEP; ++spins) {
            cpu_relax();
            now = atomic_load(&pool.generation);
        }
        if (now == seen) {
            pthread_mutex_lock(&pool.mu);
            atomic_store(&pool.sleeping, 1);
            while ((now = atomic_load(&pool.generation)) == seen) pthread_cond_wait(&pool.wake, &pool.mu);
            atomic_store(&pool.sleeping, 0);
            pthread_mutex_unlock(&pool.mu);
        }
        seen = now;
        write_csr(pool.job.csr);
        if (!blas_single && pool.job.args->blas_threads) {
            pool.job.args->blas_threads(1); /* a new thread's MKL would fork onto every core */
            blas_single = 1;
        }
        run_job(&pool.job, 1);
    }
    return NULL;
}

/* A forked child has no helper thread: it starts its own on its first two-thread job. */
static void forget_helper(void) {
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.wake, NULL);
    atomic_store(&pool.sleeping, 0);
    atomic_flag_clear(&pool.busy);
    pool.started = 0;
}

static int helper_ready(void) {
    static int fork_handler = 0;
    if (!fork_handler) fork_handler = pthread_atfork(NULL, NULL, forget_helper) == 0;
    if (pool.started == 0) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        void *start = (void *)(intptr_t)atomic_load(&pool.generation);
        pool.started = pthread_create(&thread, &attr, helper_main, start) == 0 ? 1 : -1;
        pthread_attr_destroy(&attr);
    }
    return pool.started == 1;
}

/* The steps over rows [0, rows) of every configuration's order, `batch` rows at a time, on
   args->threads threads (1 or 2). */
static void run_steps(const StepArgs *args, int64_t rows, int64_t batch) {
    if (args->groups <= 0 || rows <= 0 || batch <= 0) return;
    const int largest = (int)(batch < rows ? batch : rows);
    if (args->threads < 2 || atomic_flag_test_and_set(&pool.busy)) {
        StepJob alone = {.args = args, .rows = rows, .batch = batch, .largest = largest, .threads = 1};
        run_job(&alone, 0);
        return;
    }
    if (!helper_ready()) {
        atomic_flag_clear(&pool.busy);
        StepJob alone = {.args = args, .rows = rows, .batch = batch, .largest = largest, .threads = 1};
        run_job(&alone, 0);
        return;
    }
    pool.job.args = args;
    pool.job.rows = rows;
    pool.job.batch = batch;
    pool.job.largest = largest;
    pool.job.threads = 2;
    pool.job.csr = read_csr();
    atomic_store(&pool.job.part[0].done, 0);
    atomic_store(&pool.job.part[1].done, 0);
    atomic_fetch_add(&pool.generation, 1);
    if (atomic_load(&pool.sleeping)) {
        pthread_mutex_lock(&pool.mu);
        pthread_cond_signal(&pool.wake);
        pthread_mutex_unlock(&pool.mu);
    }
    run_job(&pool.job, 0); /* its last pass waits for the helper's: the helper is done */
    atomic_flag_clear(&pool.busy);
}

/* One step of every configuration on its rows args->index[g, 0 : args->batch]. */
void tosca_step(const StepArgs *args) { run_steps(args, args->batch, args->batch); }

/* An epoch: steps of args->batch rows over rows [0, rows) of every configuration's order
   args->index ([G, index_stride]), the last step taking what is left. */
void tosca_epoch(const StepArgs *args, int64_t rows) { run_steps(args, rows, args->batch); }
#define FORWARD_BLOCK 64 /* rows per pass: the block's activations stay in cache */

/* One block's scratch of the forward: the activations, and the row norms of its output. */
typedef struct {
    Acts t;
    float *norm, *denom;
} ForwardBuffers;

static ForwardBuffers take_forward(Carver *c, int b, int d, int R, int S) {
    ForwardBuffers f;
    f.t = take_acts(c, b, d, R, S);
    f.norm = take(c, b);
    f.denom = take(c, b);
    return f;
}

int64_t tosca_forward_workspace_floats(int64_t dim, int64_t r, int64_t s) {
    Carver count = {NULL, 0};
    take_forward(&count, FORWARD_BLOCK, (int)dim, (int)r, (int)s);
    return count.used;
}

/* Every configuration's LuCA output (or unit output) on the same rows of x. */
void tosca_forward(const ForwardArgs *A) {
    const int d = (int)A->dim, R = (int)A->r, S = (int)A->s, flow = (int)A->flow;
    for (int64_t g = 0; g < A->groups; ++g) {
        const float *p = A->params + g * A->param_size;
        for (int64_t lo = 0; lo < A->rows; lo += FORWARD_BLOCK) {
            const int b = (int)(A->rows - lo < FORWARD_BLOCK ? A->rows - lo : FORWARD_BLOCK);
            Carver carver = {A->work, 0};
            const ForwardBuffers f = take_forward(&carver, b, d, R, S);
            float *out = A->out + g * A->out_stride + lo * d;
            luca_forward(A->gemm, p, &A->off, flow, b, d, R, S, A->x + lo * d, &f.t, out);
            if (A->normalize) normalize_rows(out, out, f.norm, f.denom, b, d);
        }
    }
}


/* Products through `gemm` by the step's own matmul wrapper, for native.py to compare with torch's
   when it loads the library: a [m, k] @ [k, n] as stored plainly (out[0]), with A stored
   transposed (out[1]), with B stored transposed (out[2]), and added onto out[0]'s copy in out[3]
   (beta = 1). a: [m, k], at: [k, m], bm: [k, n], bt: [n, k]; out: 4 x [m, n]. */
void tosca_gemm_check(sgemm_fn gemm, int64_t m, int64_t n, int64_t k, const float *a, const float *at,
                      const float *bm, const float *bt, float *out) {
    const int64_t mn = m * n;
    matmul(gemm, 0, 0, (int)m, (int)n, (int)k, a, (int)k, bm, (int)n, 0.0f, out, (int)n);
    matmul(gemm, 1, 0, (int)m, (int)n, (int)k, at, (int)m, bm, (int)n, 0.0f, out + mn, (int)n);
    matmul(gemm, 0, 1, (int)m, (int)n, (int)k, a, (int)k, bt, (int)k, 0.0f, out + 2 * mn, (int)n);
    memcpy(out + 3 * mn, out, sizeof(float) * mn);
    matmul(gemm, 0, 0, (int)m, (int)n, (int)k, a, (int)k, bm, (int)n, 1.0f, out + 3 * mn, (int)n);
}

/* What native.py compares with its ctypes mirrors and the layout spec each time it loads this library. */
int64_t tosca_abi_version(void) { return TOSCA_ABI_VERSION; }
int64_t tosca_sizeof_step_args(void) { return (int64_t)sizeof(StepArgs); }
int64_t tosca_sizeof_forward_args(void) { return (int64_t)sizeof(ForwardArgs); }
const char *tosca_slot_names(void) { return TOSCA_SLOT_NAMES; }
