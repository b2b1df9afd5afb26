/* One SGD step of LuCA + cosine classifier + cross-entropy + L1 for G configurations, fused.

   The same arithmetic as tosca_heads/engine/kernels.py (LucaStep) followed by optim.py
   (GroupSGD), written as a few passes over each [b, d] activation instead of ~100 separate
   PyTorch operations. On a CPU a step's matmuls are tiny (48 x 768 x 48), so the element-wise
   work and its per-operation overhead cost more than the matmuls; here the matmuls go to the BLAS
   PyTorch links (its sgemm_, passed in as a function pointer, so they run on the same MKL
   threads) and everything else is a handful of vectorisable loops.

   Layout conventions (row-major, as the Python engine): weights are kept transposed against
   nn.Linear (down.weight is [d, r]), bottlenecks are zero-padded to the group's largest r and s
   (padding stays exactly 0: GELU(0) = ReLU(0) = 0 and the outgoing weights are 0).
   Compiled on first use by tosca_heads/engine/native.py; no Python headers needed. */

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <stddef.h>

/* The calling convention between this library and native.py: bumped with any change of the
   structs below or of an exported function's signature; native.py checks it, and the structs'
   sizes, every time it loads the library. */
#define TOSCA_ABI_VERSION 2

typedef int (*set_threads_fn)(int); /* MKL_Set_Num_Threads_Local, or NULL */
/* Fortran's sgemm_: every argument by reference, and the two CHARACTER arguments' lengths passed
   as hidden trailing arguments (gfortran's convention; C implementations of BLAS ignore them). */
typedef void (*sgemm_fn)(const char *, const char *, const int *, const int *, const int *,
                         const float *, const float *, const int *, const float *, const int *,
                         const float *, float *, const int *, size_t, size_t);

enum { FLOW_TOSCA = 0, FLOW_TOSCA_R = 1, FLOW_ADAPTER = 2, FLOW_CALIBRATOR = 3 };

/* Where each parameter starts in a configuration's flat vector; -1 where the flow has none. */
typedef struct {
    int64_t down_w, down_b, up_w, up_b, norm_w, norm_b, cal_down_w, cal_up_w;
} Slots;

/* Mirrors the ctypes Structure in native.py field by field. */
typedef struct {
    int64_t groups, batch, dim, r, s, classes, flow, track, threads;
    int64_t param_size;
    Slots off;
    const float *features; /* [n, d] this epoch's training features */
    const int64_t *targets; /* [n] class ids */
    const int64_t *index;   /* [G, index_stride]: this batch's rows, per configuration */
    int64_t index_stride;
    float *flat, *grad_flat, *buf_flat;       /* [G, P] */
    float *weight, *grad_weight, *buf_weight; /* [G, C, d] */
    float *sigma, *grad_sigma, *buf_sigma;    /* [G] */
    const float *neg_lr, *momentum, *decay, *l1; /* [G] */
    double *epoch_loss; /* [G] += CE loss of this step */
    double *loss_sum;   /* [G] += (CE + l1 * |theta|_1) * b, when track */
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
    float *out;          /* [G, rows, d] */
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

#define MAX_THREADS 2 /* the step's parts: the caller and one helper thread (below) */

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

/* LuCA's output for b rows of x (method.md §3), keeping the activations in t */
static void luca_forward(sgemm_fn gemm, const float *p, const Slots *off, int flow, int b, int d,
                         int R, int S, const float *x, const Acts *t, float *out) {
    if (flow != FLOW_CALIBRATOR) {
        const float *bd = p + off->down_b, *bu = p + off->up_b;
        const float *gamma = p + off->norm_w, *beta = p + off->norm_b;
        matmul(gemm, 0, 0, b, R, d, x, d, p + off->down_w, R, 0.0f, t->h, R);
        for (int i = 0; i < b; ++i)
            for (int j = 0; j < R; ++j) {
                float v = t->h[i * R + j] + bd[j];
                t->h[i * R + j] = v;
                t->a[i * R + j] = gelu(v);
            }
        matmul(gemm, 0, 0, b, d, R, t->a, R, p + off->up_w, d, 0.0f, t->u, d);
        for (int i = 0; i < b; ++i) {
            float *ui = t->u + (int64_t)i * d, *zh = t->zhat + (int64_t)i * d, *zi = t->z + (int64_t)i * d;
            const float *xi = x + (int64_t)i * d;
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
    const float *v_in = flow == FLOW_TOSCA ? t->z : x; /* the calibrator's input */
    if (flow != FLOW_ADAPTER) {
        matmul(gemm, 0, 0, b, S, d, v_in, d, p + off->cal_down_w, S, 0.0f, t->q, S);
        for (int64_t k = 0; k < (int64_t)b * S; ++k) t->q[k] = t->q[k] > 0.0f ? t->q[k] : 0.0f;
        matmul(gemm, 0, 0, b, d, S, t->q, S, p + off->cal_up_w, d, 0.0f, t->gate, d);
#pragma omp simd
        for (int64_t k = 0; k < (int64_t)b * d; ++k) t->gate[k] = sigmoid(t->gate[k]);
    }
    const int64_t bd_n = (int64_t)b * d;
    if (flow == FLOW_TOSCA)
        for (int64_t k = 0; k < bd_n; ++k) out[k] = t->z[k] * t->gate[k];
    else if (flow == FLOW_TOSCA_R)
        for (int64_t k = 0; k < bd_n; ++k) out[k] = t->z[k] + x[k] * t->gate[k];
    else if (flow == FLOW_ADAPTER)
        memcpy(out, t->z, sizeof(float) * bd_n);
    else
        for (int64_t k = 0; k < bd_n; ++k) out[k] = x[k] * t->gate[k];
}

/* ---- two threads per step ----------------------------------------------------------------
   A step of 48 rows is a chain of dependent matmuls too small for MKL's fork-join, but it splits
   by hand: the forward and the row-wise backward by batch rows, the weight gradients and their
   update by output rows of each parameter (each thread updates exactly what it computed), with
   three barriers per configuration. The caller's thread is part 0; one helper thread, started on
   first use and parked on a condition variable between jobs, is part 1. The sums over batch rows
   that cross the split (the LayerNorm parameters' gradients, the L1 tally) are per-part partial
   sums added in part order, and the BLAS rounds a half-height matmul its own way, so two threads
   give one thread's numbers to float rounding (tested), not bit for bit. One thread does exactly
   what the step did before the split. */

#define SPIN_BEFORE_YIELD 2000   /* barrier: spins before giving the core away */
#define SPIN_BEFORE_SLEEP 20000 /* helper: spins between jobs before sleeping (0.1-1 ms, by CPU) */

typedef struct {
    atomic_int count;
    atomic_uint phase; /* wraps around harmlessly */
} Barrier;

typedef struct {
    const StepArgs *args;
    int threads;
    unsigned csr; /* the caller's floating-point control (flush-to-zero), applied by the helper */
    Barrier barrier;
    float l1_part[MAX_THREADS]; /* each part's sum |p| of the module after its update */
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

/* Sense by phase counter: the last to arrive resets the count, then moves the phase on. The
   waiting side spins briefly, then yields (an evaluation thread may want the core). */
static void barrier_wait(Barrier *b, int threads) {
    if (threads == 1) return;
    const unsigned phase = atomic_load_explicit(&b->phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&b->count, 1, memory_order_acq_rel) == threads - 1) {
        atomic_store_explicit(&b->count, 0, memory_order_relaxed);
        atomic_store_explicit(&b->phase, phase + 1, memory_order_release);
        return;
    }
    for (int spins = 0; atomic_load_explicit(&b->phase, memory_order_acquire) == phase; ++spins) {
        if (spins < SPIN_BEFORE_YIELD)
            cpu_relax();
        else
            sched_yield();
    }
}

/* [lo, hi) of part k of n items split into `parts` near-equal ranges */
static inline void part_range(int64_t n, int k, int parts, int64_t *lo, int64_t *hi) {
    *lo = n * k / parts;
    *hi = n * (k + 1) / parts;
}

static Acts rows_of(const Acts *t, int64_t lo, int d, int R, int S) {
    Acts v = {t->h + lo * R, t->a + lo * R, t->u + lo * d, t->zhat + lo * d, t->z + lo * d,
              t->rstd + lo, t->q + lo * S, t->gate + lo * d};
    return v;
}

static void column_sums_range(const float *x, float *out, int rows, int cols, int64_t lo, int64_t hi) {
    for (int64_t j = lo; j < hi; ++j) out[j] = 0.0f;
    for (int i = 0; i < rows; ++i) {
        const float *xi = x + (int64_t)i * cols;
        for (int64_t j = lo; j < hi; ++j) out[j] += xi[j];
    }
}

/* One step's scratch: the batch, the forward's activations, the classifier's and the backward's. */
typedef struct {
    float *x;
    int64_t *y;
    Acts t;
    float *out, *unit, *norm, *denom, *w_unit, *w_norm, *w_denom, *cosv, *dlog;
    float *d_out, *d_c2, *d_u, *d_c1, *d_h;
    double *row_loss, *row_dsig;
    int64_t *row_hit;
    float *part_gamma, *part_beta; /* each part's LayerNorm sums */
} StepBuffers;

static StepBuffers take_step(Carver *c, int b, int d, int R, int S, int C) {
    StepBuffers w;
    w.x = take(c, (int64_t)b * d);
    w.y = (int64_t *)take(c, 2 * (int64_t)b);
    w.t = take_acts(c, b, d, R, S);
    w.out = take(c, (int64_t)b * d);
    w.unit = take(c, (int64_t)b * d);
    w.norm = take(c, b);
    w.denom = take(c, b);
    w.w_unit = take(c, (int64_t)C * d);
    w.w_norm = take(c, C);
    w.w_denom = take(c, C);
    w.cosv = take(c, (int64_t)b * C);
    w.dlog = take(c, (int64_t)b * C);
    w.d_out = take(c, (int64_t)b * d);
    w.d_c2 = take(c, (int64_t)b * d);
    w.d_u = take(c, (int64_t)b * d);
    w.d_c1 = take(c, (int64_t)b * S);
    w.d_h = take(c, (int64_t)b * R);
    w.row_loss = (double *)take(c, 2 * (int64_t)b);
    w.row_dsig = (double *)take(c, 2 * (int64_t)b);
    w.row_hit = (int64_t *)take(c, 2 * (int64_t)b);
    w.part_gamma = take(c, (int64_t)MAX_THREADS * d);
    w.part_beta = take(c, (int64_t)MAX_THREADS * d);
    return w;
}

/* Floats of scratch one configuration's step needs (reused across configurations). */
int64_t tosca_workspace_floats(int64_t batch, int64_t dim, int64_t r, int64_t s, int64_t classes) {
    Carver count = {NULL, 0};
    take_step(&count, (int)batch, (int)dim, (int)r, (int)s, (int)classes);
    return count.used;
}

/* Part k of configuration g's step. */
static void step_one(StepJob *J, int64_t g, int k) {
    const StepArgs *A = J->args;
    const int K = J->threads;
    const int b = (int)A->batch, d = (int)A->dim, R = (int)A->r, S = (int)A->s, C = (int)A->classes;
    const int flow = (int)A->flow;
    const int64_t P = A->param_size;
    const sgemm_fn gemm = A->gemm;
    float *p = A->flat + g * P, *gp = A->grad_flat + g * P, *bp = A->buf_flat + g * P;
    float *W = A->weight + g * (int64_t)C * d, *gW = A->grad_weight + g * (int64_t)C * d;
    float *bW = A->buf_weight + g * (int64_t)C * d;
    const float sig = A->sigma[g];
    const int has_adapter = flow != FLOW_CALIBRATOR, has_calibrator = flow != FLOW_ADAPTER;
    const Slots *off = &A->off;

    Carver carver = {A->work, 0}; /* every part carves the same buffers */
    const StepBuffers w = take_step(&carver, b, d, R, S, C);
    float *x = w.x;
    int64_t *y = w.y;
    const Acts t = w.t;
    float *h = t.h, *a = t.a, *zhat = t.zhat, *z = t.z, *rstd = t.rstd, *q = t.q, *gate = t.gate;
    float *out = w.out, *unit = w.unit, *norm = w.norm, *denom = w.denom;
    float *w_unit = w.w_unit, *w_norm = w.w_norm, *w_denom = w.w_denom, *cosv = w.cosv, *dlog = w.dlog;
    float *d_out = w.d_out, *d_c2 = w.d_c2, *d_u = w.d_u, *d_c1 = w.d_c1, *d_h = w.d_h;
    double *row_loss = w.row_loss, *row_dsig = w.row_dsig;
    int64_t *row_hit = w.row_hit;
    float *part_gamma = w.part_gamma, *part_beta = w.part_beta;
    const float *v_in = flow == FLOW_TOSCA ? z : x; /* the calibrator's input */

    int64_t r0, r1, c0, c1, j0, j1, R0, R1, S0, S1; /* this part's rows, classes, dims, units */
    part_range(b, k, K, &r0, &r1);
    part_range(C, k, K, &c0, &c1);
    part_range(d, k, K, &j0, &j1);
    part_range(R, k, K, &R0, &R1);
    part_range(S, k, K, &S0, &S1);
    const int nb = (int)(r1 - r0);

    /* ---- this part's batch rows, and its classifier rows normalised */
    const int64_t *rows = A->index + g * A->index_stride;
    for (int64_t i = r0; i < r1; ++i) {
        memcpy(x + i * d, A->features + rows[i] * d, sizeof(float) * d);
        y[i] = A->targets[rows[i]];
    }
    normalize_rows(W + c0 * d, w_unit + c0 * d, w_norm + c0, w_denom + c0, (int)(c1 - c0), d);
    barrier_wait(&J->barrier, K);

    /* ---- forward, cross-entropy and the backward down to each row's d_h: this part's rows */
    const Acts tk = rows_of(&t, r0, d, R, S);
    luca_forward(gemm, p, off, flow, nb, d, R, S, x + r0 * d, &tk, out + r0 * d);
    normalize_rows(out + r0 * d, unit + r0 * d, norm + r0, denom + r0, nb, d);
    matmul(gemm, 0, 1, nb, C, d, unit + r0 * d, d, w_unit, d, 0.0f, cosv + r0 * C, C);

    const float inv_b = 1.0f / (float)b;
    for (int64_t i = r0; i < r1; ++i) {
        const float *ci = cosv + i * C;
        float *di = dlog + i * C;
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
        row_loss[i] = -(double)(di[y[i]] - lse);
        row_hit[i] = best == y[i];
        for (int c = 0; c < C; ++c) di[c] = fast_exp(di[c] - lse) * inv_b;
        di[y[i]] += -inv_b;
        double ds = 0.0;
        for (int c = 0; c < C; ++c) {
            ds += (double)di[c] * ci[c];
            di[c] *= sig;
        }
        row_dsig[i] = ds;
    }
    matmul(gemm, 0, 0, nb, d, C, dlog + r0 * C, C, w_unit, d, 0.0f, d_out + r0 * d, d);
    normalize_backward(d_out + r0 * d, unit + r0 * d, norm + r0, denom + r0, nb, d);

    if (has_calibrator) {
        const float *mult = flow == FLOW_TOSCA ? z : x;
        for (int64_t e = r0 * d; e < r1 * d; ++e)
            d_c2[e] = d_out[e] * mult[e] * (1.0f - gate[e]) * gate[e];
        matmul(gemm, 0, 1, nb, S, d, d_c2 + r0 * d, d, p + off->cal_up_w, d, 0.0f, d_c1 + r0 * S, S);
        for (int64_t e = r0 * S; e < r1 * S; ++e) d_c1[e] = q[e] > 0.0f ? d_c1[e] : 0.0f;
    }
    float *d_z = d_out; /* tosca_r, adapter: out = ... + LN(A(x)) */
    if (has_adapter) {
        if (flow == FLOW_TOSCA) {
            for (int64_t e = r0 * d; e < r1 * d; ++e) d_z[e] = d_out[e] * gate[e];
            matmul(gemm, 0, 1, nb, d, S, d_c1 + r0 * S, S, p + off->cal_down_w, S, 1.0f, d_z + r0 * d, d);
        }
        const float *gamma = p + off->norm_w;
        float *g_gamma = part_gamma + (int64_t)k * d, *g_beta = part_beta + (int64_t)k * d;
        for (int j = 0; j < d; ++j) g_gamma[j] = g_beta[j] = 0.0f;
        for (int64_t i = r0; i < r1; ++i) {
            const float *dz = d_z + i * d, *zh = zhat + i * d;
            float *du = d_u + i * d;
            float sg = 0.0f, sgz = 0.0f;
#pragma omp simd reduction(+ : sg, sgz)
            for (int j = 0; j < d; ++j) {
                g_gamma[j] += dz[j] * zh[j];
                g_beta[j] += dz[j];
                float gj = dz[j] * gamma[j];
                du[j] = gj;
                sg += gj;
                sgz += gj * zh[j];
            }
            float mg = sg / (float)d, mgz = sgz / (float)d, rs = rstd[i];
            for (int j = 0; j < d; ++j) du[j] = (du[j] - mg - zh[j] * mgz) * rs;
        }
        matmul(gemm, 0, 1, nb, R, d, d_u + r0 * d, d, p + off->up_w, d, 0.0f, d_h + r0 * R, R);
        for (int64_t e = r0 * R; e < r1 * R; ++e) d_h[e] *= gelu_grad(h[e]);
    }
    barrier_wait(&J->barrier, K);

    /* ---- every weight gradient over all rows, split by its output rows; each part updates the
       slices it computed (the flat vector is the slots back to back, so they cover it) */
    const float lr = A->neg_lr[g], m = A->momentum[g], wd = A->decay[g], l1 = A->l1[g];
    float l1_norm = 0.0f;
    matmul(gemm, 1, 0, (int)(c1 - c0), d, b, dlog + c0, C, unit, d, 0.0f, gW + c0 * d, d);
    normalize_backward(gW + c0 * d, w_unit + c0 * d, w_norm + c0, w_denom + c0, (int)(c1 - c0), d);
    sgd(W + c0 * d, gW + c0 * d, bW + c0 * d, (c1 - c0) * d, lr, m, wd, 0.0f);
    if (has_calibrator) {
        const int64_t up = off->cal_up_w + S0 * d, down = off->cal_down_w + j0 * S;
        matmul(gemm, 1, 0, (int)(S1 - S0), d, b, q + S0, S, d_c2, d, 0.0f, gp + up, d);
        matmul(gemm, 1, 0, (int)(j1 - j0), S, b, v_in + j0, d, d_c1, S, 0.0f, gp + down, S);
        l1_norm += sgd(p + up, gp + up, bp + up, (S1 - S0) * d, lr, m, wd, l1);
        l1_norm += sgd(p + down, gp + down, bp + down, (j1 - j0) * S, lr, m, wd, l1);
    }
    if (has_adapter) {
        float *g_gamma = gp + off->norm_w, *g_beta = gp + off->norm_b;
        for (int64_t j = j0; j < j1; ++j) { /* the parts' LayerNorm sums, in part order */
            float sum_gamma = part_gamma[j], sum_beta = part_beta[j];
            for (int part = 1; part < K; ++part)
                sum_gamma += part_gamma[(int64_t)part * d + j], sum_beta += part_beta[(int64_t)part * d + j];
            g_gamma[j] = sum_gamma;
            g_beta[j] = sum_beta;
        }
        column_sums_range(d_u, gp + off->up_b, b, d, j0, j1);
        column_sums_range(d_h, gp + off->down_b, b, R, R0, R1);
        const int64_t up = off->up_w + R0 * d, down = off->down_w + j0 * R;
        matmul(gemm, 1, 0, (int)(R1 - R0), d, b, a + R0, R, d_u, d, 0.0f, gp + up, d);
        matmul(gemm, 1, 0, (int)(j1 - j0), R, b, x + j0, d, d_h, R, 0.0f, gp + down, R);
        l1_norm += sgd(p + down, gp + down, bp + down, (j1 - j0) * R, lr, m, wd, l1);
        l1_norm += sgd(p + off->down_b + R0, gp + off->down_b + R0, bp + off->down_b + R0, R1 - R0, lr, m,
                       wd, l1);
        l1_norm += sgd(p + up, gp + up, bp + up, (R1 - R0) * d, lr, m, wd, l1);
        const int64_t vec[3] = {off->up_b, off->norm_w, off->norm_b};
        for (int v = 0; v < 3; ++v)
            l1_norm += sgd(p + vec[v] + j0, gp + vec[v] + j0, bp + vec[v] + j0, j1 - j0, lr, m, wd, l1);
    }
    J->l1_part[k] = l1_norm;
    if (k == 0) { /* sigma: every row's share, summed in row order */
        double d_sigma = 0.0;
        for (int i = 0; i < b; ++i) d_sigma += row_dsig[i];
        A->grad_sigma[g] = (float)d_sigma;
        sgd(A->sigma + g, A->grad_sigma + g, A->buf_sigma + g, 1, lr, m, wd, 0.0f);
    }
    barrier_wait(&J->barrier, K);

    if (k == 0) {
        double loss = 0.0, total_l1 = 0.0;
        int64_t hits = 0;
        for (int i = 0; i < b; ++i) loss += row_loss[i], hits += row_hit[i];
        for (int part = 0; part < K; ++part) total_l1 += J->l1_part[part];
        loss /= b;
        A->epoch_loss[g] += loss;
        if (A->track) {
            A->loss_sum[g] += (loss + (double)l1 * total_l1) * b;
            A->correct[g] += hits;
        }
    }
}

/* The count is read once: after the last configuration's final barrier the caller may return,
   free these arguments or post the next job, so the helper must not look at them again. */
static void run_job(StepJob *J, int k) {
    const int64_t groups = J->args->groups;
    for (int64_t g = 0; g < groups; ++g) step_one(J, g, k);
}

/* The helper thread and the one job it shares with the caller (static: a helper may still be
   leaving the last barrier when the caller returns). Steps of one process are serialised by
   `busy`; a step that finds it taken runs on one thread. */
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

/* A forked child has no helper thread: it starts its own on its first two-thread step. */
static void forget_helper(void) {
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.wake, NULL);
    atomic_store(&pool.sleeping, 0);
    atomic_flag_clear(&pool.busy);
    atomic_store(&pool.job.barrier.count, 0); /* a step may have been inside a barrier at the fork */
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

/* One step of every configuration (each its own batch rows, parameters and hyper-parameters), on
   args->threads threads (1 or 2). */
void tosca_step(const StepArgs *args) {
    if (args->groups <= 0) return; /* a posted job without barriers could be run twice */
    if (args->threads < 2 || atomic_flag_test_and_set(&pool.busy)) {
        StepJob alone = {.args = args, .threads = 1};
        run_job(&alone, 0);
        return;
    }
    if (!helper_ready()) {
        atomic_flag_clear(&pool.busy);
        StepJob alone = {.args = args, .threads = 1};
        run_job(&alone, 0);
        return;
    }
    pool.job.args = args;
    pool.job.threads = 2;
    pool.job.csr = read_csr();
    atomic_fetch_add(&pool.generation, 1);
    if (atomic_load(&pool.sleeping)) {
        pthread_mutex_lock(&pool.mu);
        pthread_cond_signal(&pool.wake);
        pthread_mutex_unlock(&pool.mu);
    }
    run_job(&pool.job, 0); /* ends on the last configuration's final barrier: the helper is done */
    atomic_flag_clear(&pool.busy);
}

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
            float *out = A->out + (g * A->rows + lo) * d;
            luca_forward(A->gemm, p, &A->off, flow, b, d, R, S, A->x + lo * d, &f.t, out);
            if (A->normalize) normalize_rows(out, out, f.norm, f.denom, b, d);
        }
    }
}

/* What native.py compares with its ctypes mirrors each time it loads this library. */
int64_t tosca_abi_version(void) { return TOSCA_ABI_VERSION; }
int64_t tosca_sizeof_step_args(void) { return (int64_t)sizeof(StepArgs); }
int64_t tosca_sizeof_forward_args(void) { return (int64_t)sizeof(ForwardArgs); }
