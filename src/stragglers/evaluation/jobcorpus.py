"""A second, independent labelled corpus: per-rank iteration *record streams* of whole jobs.

:mod:`stragglers.evaluation.corpus` scores detectors on bare float series.  This module builds
what ``stragglers watch`` really reads: iteration records ``{rank, iter, ts?, duration?}`` of
one to four ranks, interleaved by iteration as a multi-rank log is, with the things a real
job does that a bare series does not show: restarts that replay iterations, asynchronous
checkpoint stalls, flapping links, scheduled staircase drifts, noise regime changes,
sampled and averaged logging, one slow rank among several, and Greyhound-style injection
schedules.  It shares no code with ``corpus.py`` (its own noise model, its own events).

Everything is determined by the seed: series ``i`` of scenario ``s`` of family ``f`` draws
from ``numpy.random.default_rng([seed, f, s, i])`` (indices in :data:`FAMILIES` /
:data:`SCENARIOS`), so a series does not change when ``scale`` adds series after it.

Noise model (per rank, all constants below)
-------------------------------------------
The time of executed iteration ``t`` of rank ``r`` is ``healthy[t] x factor[r, t] x
exp(e[r, t]) x spike[r, t]``:

* ``healthy``: the noise-free healthy time: a base time (log-uniform
  :data:`BASE_S`), the job start's warm-up (first iteration :data:`FIRST_ITER_FACTOR` times
  slower, then a hump of :data:`HUMP_AMPLITUDE` that decays to 0 over :data:`HUMP_ITERS`
  iterations, as ``A (1 - j/L)^2``), the same after every restart, the level of the segment
  after a re-partition, checkpoint stalls and staircase steps: all of it normal behaviour,
  never an event;
* ``factor``: the labelled slow periods, ``1 / (1 - loss)`` inside an event (overlapping
  injections multiply);
* ``e``: heavy-tailed AR(1) noise in log space: Student-t with :data:`NOISE_DF` degrees of
  freedom scaled to unit variance, filtered by ``e[t] = phi e[t-1] + sqrt(1 - phi^2) z[t]``
  (``phi`` from :data:`NOISE_PHI`) and multiplied by the noise scale (:data:`NOISE_SCALE`,
  time-varying in ``noise_regime``); each rank has its own draws;
* ``spike``: isolated spikes, each iteration with probability :data:`SPIKE_RATE`, of
  :data:`SPIKE_FACTOR` (log-uniform).

Records: the end timestamp ``ts`` is the rank's cumulative time plus the downtime of every
restart before it; ``duration`` is the iteration time.  A series gives both, only
``duration`` (``ts`` NaN) or only ``ts`` (``duration`` NaN: the watcher takes the difference
of timestamps), see :data:`FIELD_CHOICES`.  Sampled series log one record every ``stride``
iterations (iteration numbers that are multiples of it): a single iteration's time, or the mean
of the ``stride`` iterations it closes (``mean_of_stride``).  Runs of 1-50 records in a row are
dropped (:data:`MISSING_RUNS`) in several families, never inside a labelled event.

Labels
------
:class:`JobEvent` in *job iteration* units: ``[start_iter, end_iter)``, ``loss`` the throughput
loss (level ``1 / (1 - loss)`` over the healthy time), ``peak_loss`` the largest loss inside it
(overlaps), ``kind`` (``step``, ``flapping``, ``injected``, or ``minor`` for a loss below
:data:`EVENT_LOSS`: optional, neither required nor spurious) and ``ranks`` (the slow ranks;
empty: every rank).  Labelled slow periods last at least :data:`MIN_EVENT_ITERS` iterations
and lie in iterations that are never replayed by a restart.

Families (``SCENARIOS``: family, scenario, series per seed at scale 1, positive)
------------------------------------------------------------------------------
``restart``      restarts resume from the last checkpoint (interval :data:`CKPT_INTERVAL`):
                 the iteration number goes back by up to the interval, the timestamps jump
                 forward by the downtime (:data:`RESTART_DOWNTIME_S`), then a re-warm-up;
                 ``repartition`` restarts come back 5-30 % faster or slower (a new healthy
                 level, not an event); ``replay_slow`` adds a real slow period.
``ckpt_stall``   every C iterations (:data:`STALL_EVERY`) a stall of 3-6 iterations at 1.3-3x.
``flapping``     a link slow (loss 15-50 %) for 10-60 iterations, fast for 10-60, repeated
                 over 200-1500 iterations: one ``flapping`` event over the window; negatives
                 have isolated short stalls.
``staircase``    3-8 scheduled steps of +1.5-3 % each over 1000-8000 iterations (+10-15 % in
                 all; not an event), some with a real step slowdown on top.
``noise_regime`` the noise scale changes mid-run (about 1 % to 4-6 %, or back).
``sampled``      one record every 5, 10 or 100 iterations, single or mean; slow periods last
                 at least 3 records and 20 iterations.
``multirank``    2-4 ranks, each with its own noise; one slow rank (``ranks = (r,)``), or all.
``greyhound``    1-4 injected slow periods (loss 10-90 %, 20-3000 iterations, some
                 overlapping and multiplying; some sub-threshold ``minor`` ones), spikes and
                 missing records.

Families added for issue 29 (what a held-back corpus of another generator showed missing),
each built from a mechanism rather than from the issue's numbers:

``failslow``     computation and communication fail-slow episodes (Falcon's characterisation
                 study: CPU contention, GPU throttling, network congestion; tens of seconds
                 to hours).  An iteration is compute plus exposed communication; an episode
                 slows one of them, and the iteration by +10-50 % (:data:`FS_SLOWDOWN`) for
                 20-150 iterations (:data:`FS_ITERS`).  Compute episodes hold their level
                 (CPU contention fluctuates a little); congestion fluctuates from iteration
                 to iteration (:data:`FS_COMM_JITTER`).  Negatives: episodes of +3-8 %
                 (``minor``).
``ramp``         thermal throttling: the clock falls as the GPU heats up, so the iteration
                 time rises as ``1 - exp(-3 t / R)`` over ``R`` = 20-200 iterations
                 (:data:`RAMP_ITERS`) to +15-30 % (:data:`RAMP_SLOWDOWN`) and holds, then
                 cools back.  Negatives: scheduled drifts of +5-15 % over 800-4000 iterations
                 (sequence-length or attention-window schedules; never an event).
``short``        short strong episodes: +50-200 % for 10-20 iterations (a stalled data
                 loader, a page-cache flush, a noisy neighbour) among checkpoint-like stalls
                 of 1-6 iterations (:data:`STALL_FACTOR`).  Negatives: the stalls alone.
``hump``         gradual humps: the level rises over 5-10 iterations, holds +12-35 % for
                 10-25 and decays over 5-15 (a transient contention that builds and fades).
                 Negatives: humps of +3-7 % (``minor``).
``warmup_onset`` a slowdown (+15-60 %, a step) that starts while the job's warm-up is still
                 settling (iterations 8-40 of the job, the warm-up hump still decaying).
                 Negatives: the warm-up alone.
``reconfig``     restarts that come back reconfigured: another healthy level (+-5-30 %),
                 the iteration numbers restarted at 1 or continued from an offset ahead;
                 some with a slow period after one of them.

A family built after the last change to the detector for issue 29, from another generator
(never used to tune or change anything; only evaluated):

``ckpt_burst``   an iteration is compute plus communication, generated here rather than from
                 the corpus' healthy level and noise: compute with slow AR(1) contention
                 (:data:`CB_COMP_SIGMA`), communication with heavy-tailed (Pareto) jitter and
                 Markov-modulated bursts of 1-4 iterations at 2-5x (:data:`CB_BURST_P`),
                 and periodic checkpoint saves of 1-3 iterations at 1.5-4x every 100-400
                 iterations.  Positives: a level shift of compute or communication that makes
                 the iteration +12-45 % slower (:data:`CB_SHIFT`) for 30-600 iterations,
                 starting between two checkpoints.  Negatives: the bursts and checkpoints
                 alone, or with a shift of +3-7 % (``minor``).

The held-out family of the second round (written before that round's changes), built on
in the third:

``contention``   a replay-style trace: log-normal noise whose scale wanders 0.4-3.5 % times a
                 Pareto tail, an exponential warm-up, contention episodes of random length
                 (up to :data:`CT_STALL_MAX` iterations unlabelled, 9-19 optional, 20 or more
                 an event when their mean rise is 10 % or more); slowdowns +10-50 % for
                 20-600 iterations as a step, a ramp or a hump.

The held-out family of the third round (written and committed before that round's detector
changes, never run through the detector until they were final):

``megatron``     a Megatron-like log replay: the iteration is the sum of forward / backward
                 compute (55-85 % of it; a slowly wandering rate, AR(1) with lag-1
                 correlation 0.97-0.995, and a kernel warm-up), an all-reduce (10-35 %) that
                 takes a fast or a slow path (1.3-2.5x, the slow one 5-35 % of the
                 iterations, in runs: a two-state chain), fixed work, and data-loader stalls
                 (geometric inter-arrival, mean 30-400 iterations; 1-2 iterations of +0.2-3
                 mean iterations).  Positives: 1-3 slowdowns of one component at a time
                 (compute or all-reduce slower, or the data loader behind every step) that
                 raise the mean iteration time by +10-50 % for 20-600 iterations, as a step,
                 a ramp (5-80 iterations) or a hump; labelled by that rise, as
                 ``contention``'s slowdowns.  Negatives: the components alone.

The held-out family of the fourth round (written and committed before that round's detector
changes, never run through the detector until they were final):

``bimodal_replay`` a healthy regime of two or three persistent modes (the fast one and
                 modes +12-35 % above it), visited by a Markov chain: each visit of a mode
                 lasts a random dwell (log-uniform between the mode's own bounds, within
                 1-60 iterations; some modes 5-40), the next mode drawn at random among the
                 others; a warm-up, log-space Student-t jitter (2.5-5 degrees of freedom,
                 0.4-2.5 %).  Positives: 1-3 slowdowns of 20-600 iterations that are no
                 healthy mode: the whole regime +10-50 % as a step, a ramp or a hump (a new
                 level beyond the modes' range at its plateau), or the highest mode stuck
                 (its dwell becomes permanent for 80-600 iterations), labelled by the rise
                 over the healthy mean (a mode is stuck only where that is +10 % or more).
                 Negatives: the chain alone.

The held-out family of the fifth round (written and committed before that round's detector
changes, never run through the detector until they were final):

``ladder``       network congestion that builds and clears flow by flow (Falcon's
                 characterisation: communication fail-slows are the most frequent and last
                 longest, inter-node RDMA is the least stable link, a 1024-GPU MoE job shows
                 a "ladder-shaped" fail-slow under high variance, and Falcon's own detector
                 missed "consecutive <10 % degradations").  Healthy: a level that wanders
                 slowly (AR(1) in log space, sd 0.8-2 %, lag-1 correlation 0.99-0.998,
                 squashed into +-3.5 %), a warm-up, an evaluation / logging iteration every
                 50-500 iterations (1.5-5x), and Gaussian log-space jitter (0.4-2 %, mean 1)
                 with volatility bursts (the scale 3-6x for 40-400 iterations, at most 8 %:
                 the variance changes, the mean does not).  Each competing flow adds a rung:
                 +3-8 % of the iteration time (:data:`LD_RUNG`; every rung below the 10 %
                 rule), held 15-100 iterations; the jitter grows with the rise (x(1 + 6 x
                 rise)).  Positives: 1-2 ladders of 3-6 rungs up to a top of +18-45 %
                 (:data:`LD_TOTAL`), held 30-500 iterations (longer where the mean rise over
                 the whole ladder would be under +12 %), then cleared at once or rung by rung
                 (10-80 iterations each); each in its own part of the series, 40 healthy
                 iterations after it.  Labelled from the first rung to the end of the release
                 (kind ``ladder``), by the mean rise over that span (+12 % or more), so a delay
                 counts from the first, sub-threshold rung.  Light flows of 1-2 rungs adding
                 up to +2-5 % (:data:`LD_SMALL_TOTAL`) are healthy (never an event), in
                 positives and negatives alike.  Negatives: everything but the ladders.

The held-out family of the sixth round (written and committed before that round's detector
changes, never run through the detector until they were final):

``seqlen``       variable-length long-context batches in synchronous data parallelism (the
                 what-if study of stragglers, section 5.3: long-tailed sequence lengths,
                 quadratic self-attention, "DP ranks finishing at different times"; section
                 5.4: unsynchronised Python GC pauses that stall one worker and so the whole
                 job).  Healthy: 2-16 data-parallel ranks (:data:`SL_RANKS`), each with 1-6
                 micro-batches per step; a micro-batch packs sequences of log-normal lengths
                 (median 1/32-1/4 of the maximum, spread 1-2, clipped at the maximum; one that
                 crosses a micro-batch's end is split) and costs ``1 + attn x sum(piece^2)``
                 (``attn`` 0.5-4, :data:`SL_ATTN`); a rank's compute is the sum of its
                 micro-batches (x per-step kernel jitter 0.3-1.5 %), plus a GC pause of 0.1-0.6
                 mean compute times on its rank with chance 1/100-1/1000 per step; the step is
                 the slowest rank's compute plus the exposed all-reduce (5-25 % of the mean
                 compute, 2-10 % jitter) and fixed work (2-10 %), with a warm-up.  The healthy
                 step time is data-dependent: wide and right-skewed (coefficient of variation
                 about 4-22 %), with no level change.  Positives: 1-3 slowdowns (one in each of
                 as many equal parts after iteration 300, 40 healthy iterations after each),
                 each raising the mean step time by +12-45 % (:data:`SL_SLOWDOWN`) over the
                 series' healthy mean (after the warm-up) for 40-800 iterations
                 (:data:`SL_SLOW_ITERS`; at least 25 x (cv / rise)^2, so that the rise is five
                 standard errors of the span's mean): one slow rank (``worker``, 60 %: its
                 compute x(1 + u), u solved by bisection for the rise, so it only shows in the
                 steps it is the slowest in) or a slower all-reduce (``comm``, its time scaled
                 for the rise).  Labelled over the span, by that mean rise (kinds ``worker`` /
                 ``comm``).  Negatives: the data-dependent steps, GC pauses and warm-up alone.

The held-out family of the seventh round (written and committed before that round's detector
changes, by someone who never ran the detector on it):

``accum``        gradient accumulation logged per micro-batch (a training loop that times
                 every batch with ``accumulate_grad_batches = k``; the what-if study of
                 stragglers, section 3.2: gradients are accumulated locally and synchronised
                 after the last micro-batch's backward; C4, section 4: "a high Gradient
                 Accumulation (GA) value of 16 ... parameter updates occur only once every 16
                 steps"; Falcon, section 3: network congestion is the most frequent
                 fail-slow, CPU contention and GPU throttling the others).  Healthy: ``k`` of
                 2-16 micro-batches per optimizer step (:data:`AC_STEPS`); a micro-batch is
                 its compute (a slowly wandering rate, AR(1) in log space, sd 0.3-1.5 %, and
                 jitter 0.3-2 %, with a warm-up); only the boundary micro-batch that closes a
                 step adds the exposed gradient all-reduce (0.2-2 micro-batch times, 3-15 %
                 jitter, transient congestion of single boundaries at 1.5-4x with chance k x
                 1/400-1/80) and the optimizer step (0.05-0.3 on the GPU, or 0.5-3 offloaded
                 to the host in 40 % of the series).  So the healthy series has its own
                 periodic long iterations.  Epochs of 300-2000 micro-batches restart the
                 accumulation (the epoch's last micro-batch closes a short step) and the
                 data-loader workers (a stall of 2-15 micro-batch times); a validation pass
                 every 50-500 optimizer steps adds 2-8 micro-batch times to its boundary.
                 Positives: 1-3 slowdowns (one in each of as many equal parts after iteration
                 300, at least max(40, 3k) healthy iterations after each) of whole cycles,
                 40-800 iterations (:data:`AC_SLOW_ITERS`; at least 6 cycles and 25 x (cv /
                 rise)^2 cycles, cv that of a healthy cycle's time), each raising the mean
                 iteration time by +12-45 % (:data:`AC_SLOWDOWN`) over the series' healthy
                 mean (after the warm-up; never a span whose validation passes and epoch
                 restarts would make up half of that rise): congestion on the data-parallel
                 ring (``comm``, 50 %: 70-100 % of the span's boundaries, each all-reduce
                 slower by a factor that varies 20-50 % from boundary to boundary), CPU
                 contention on an offloaded optimizer (``offload``, 30 %, where it is
                 offloaded: the host optimizer step slower, and every micro-batch 0-3 %
                 slower), or a throttled GPU (``compute``, the rest: every micro-batch
                 slower).  The all-reduce and
                 the host optimizer step are at most about :data:`AC_COMM_MAX` /
                 :data:`AC_OFFLOAD_MAX` times slower on average, so their rise is drawn
                 below what their share of the time allows, and the slowdown is ``compute``
                 where that is under +12 % (large ``k``, a small all-reduce).  In ``comm`` and
                 ``offload`` slowdowns only every k-th iteration is slower: the mean rises
                 while most iterations, and the median, stay healthy.  Labelled over the
                 span by its mean rise (kinds ``comm`` / ``offload`` / ``compute``).
                 Negatives: the healthy series alone.

The held-out family of the eighth round (written and committed before that round's detector
changes, by someone who never ran the detector on it):

``memory``       memory pressure: PyTorch's CUDA caching allocator and Python's garbage
                 collector (the what-if study of stragglers, section 5.4: GC pauses stall one
                 worker and so the job, planned GC runs every rank at once every N steps,
                 "the amount of time for which the GC pauses execution increases as the job
                 progresses ... due to a memory leak", planned GC masks it; section 5.5:
                 memory fragmentation "led to a significant increase in calls to cudaFree and
                 cudaMalloc, which led to slower than usual forward- or backward-compute
                 operations").  Healthy: compute with a slowly wandering rate (AR(1) in log
                 space, sd 0.3-1.5 %), jitter 0.3-2 % and a warm-up; the allocator's sawtooth:
                 fragmentation grows for 50-600 iterations (:data:`MP_TOOTH`, each tooth
                 +-30 %), the compute slower by up to 1-5 % (:data:`MP_FRAG_AMP`), until the
                 cache is full and is freed and refilled (one iteration +0.3-2 iteration
                 times, :data:`MP_FLUSH`); full GC pauses of 0.1-1 iteration times
                 (:data:`MP_GC_PAUSE`, 30 % spread) that grow with the heap: automatic (each of
                 1-16 ranks with chance 1/1000-1/150 per iteration, the step waits for the
                 longest) or planned (40 %: every rank at once every 100-1000 iterations; the
                 heap then grows slowly over the series, x1.5-4, masked by the planned GC:
                 taller pauses, never an event).  Positives: 1-3 slowdowns (one in each of as
                 many equal parts after iteration 300, 40 healthy iterations after each) of
                 60-800 iterations (:data:`NODE_SLOW_ITERS`; at least 25 x (cv / rise)^2, cv
                 the healthy one), each raising the mean time over its span by +12-45 %
                 (:data:`NODE_SLOWDOWN`) over the series' healthy mean: allocator thrash
                 (``frag``, half of them and every one under planned GC: the cache fills 2-8x
                 sooner, the teeth at least 5 iterations and 3 in the span, every tooth
                 climbing higher, the height solved for the rise; the added flushes make at
                 most half of it, else the slowdown is a leak) or a host memory leak
                 (``leak``, the other half, under automatic GC: the heap
                 grows linearly over the span, every GC pause with it, and every iteration
                 slower by 0.1-1x the heap's growth, the growth rate solved for the rise;
                 freed at the span's end, so the time creeps up and drops back).  Labelled
                 over the span by its mean rise (kinds ``frag`` / ``leak``).  Negatives: the
                 healthy series alone.

The held-out family of the ninth round (written and committed before that round's detector
changes, by someone who never ran the detector on it):

``prefetch``     input-pipeline stalls behind a prefetch queue (the what-if study of
                 stragglers, section 6: "data is stored on a remote storage cluster using a
                 separate, slower network, data loading is susceptible to network slowdown and
                 time-out"; MegaScale, section 3: data loaders compete for disk read bandwidth;
                 C4, section 2: stalls "due to delays in ... data loading tasks").  Healthy:
                 compute with a slowly wandering rate (AR(1) in log space, sd 0.3-1.5 %),
                 jitter 0.3-2 % and a warm-up; a loader (the worker pool) that produces a batch
                 every ``rho`` = 0.55-0.85 mean compute times (:data:`DL_RHO`; log-normal, spread
                 5-30 %) into a queue of 2-16 batches (:data:`DL_DEPTH`); each step takes one
                 and waits for it when the queue is empty (a fluid queue, ``q = clip(q + c / p -
                 1, 0, depth)``, computed as a scan of clip maps).  Storage hiccups (a slow open
                 or read: 1-3 batches 3-20x slower, chance 1/1000-1/150 per batch) drain the
                 queue now and then: a few single long steps.  Epochs of 300-3000 steps restart
                 non-persistent workers (half the series): the queue empty, a wait of 1-10 mean
                 steps.  Hidden storage slowdowns (every read slower for 100-1000 steps, the
                 loader's utilisation at most 0.9): the queue hides them, never an event.
                 Positives: 1-3 slowdowns (one in each of as many equal parts after iteration
                 300, at least 40 healthy iterations after each), each raising the mean step
                 time over its visible span by +12-45 % (:data:`NODE_SLOWDOWN`) over the series'
                 healthy mean: a slower storage (``storage``, 60 %: every read slower, the
                 loader's utilisation above 1, so the queue drains first, up to depth x (1 + s)
                 / s steps in which nothing shows, then the steps wait for the loader, wider
                 by the read times' spread) or a storm of hiccups (``storm``: the filesystem's
                 metadata server overloaded, hiccups of 2-8x start with a chance up to 0.5 per
                 batch: dense stalls, most steps and the median healthy).  The size is solved
                 by bisection for the rise; the span lasts 60-800 steps and at least 25 x (cv /
                 rise)^2 (the healthy cv; storms 4x that), and at least 25 x (noise / rise)^2
                 steps in the labelled span (its step-to-step noise, winsorised at its 98th
                 percentile), drawn again (at most 8 times) until it is.  Labelled over the
                 visible span (from the first step that waits longer than in the healthy series
                 to the last, the queue refilled), by its mean rise (kinds ``storage`` /
                 ``storm``).  Negatives: the healthy series alone (hiccups, restarts, hidden
                 slowdowns).

The held-out family of the tenth round (written and committed before that round's detector
changes, by someone who never ran the detector on it):

``pipeline``     pipeline-parallel training (Falcon: hybrid-parallel jobs with 4- and 8-stage
                 pipelines, their bubbles, and the micro-batch adjustment that mitigates a slow one;
                 MegaScale, section 5: the 3D-parallel view that finds a slow stage; C4, section
                 3.1: slow compute found by the receivers that wait). An iteration is a GPipe
                 schedule over ``p`` = 2-8 stages (:data:`PP_STAGES`) and ``m`` = 4-32 micro-batches
                 (:data:`PP_MICRO`, at least ``p``, at first at most ``3 p``): each stage runs its
                 forwards in order, then its backwards (1.8-2.2x) in reverse order after the last
                 stage's last forward; a micro-batch starts when its input (activations or
                 gradients, sent over the link between two stages: 2-30 % of a forward, 5-20 %
                 jitter) has arrived and the stage is free; then each stage's exposed data-parallel
                 all-reduce (2-20 % of the iteration); the iteration time is the longest path (a
                 max-plus scan per stage, vectorised over iterations). Healthy: stages imbalanced by
                 up to 25 % (the first and last heavier: embedding, loss head), each stage's rate
                 wandering slowly (AR(1) in log space, sd 0.3-1.2 %), jitter per stage, micro-batch
                 and pass (0.5-3 %), the warm-up, transfer hiccups (one transfer 3-20x slower,
                 chance 1/400-1/80 per iteration); in 60 % of the series an online micro-batch
                 schedule change (the global batch kept, ``o + (1 - o) m0 / m`` per micro-batch,
                 ``o`` the fixed share 2-15 %) to an ``m`` whose level is 0.7-1.03x the old one
                 (:data:`PP_CHANGE_RATIO`; with chance 0.75 one of 0.97x or less where there is one:
                 a smaller bubble, a level change that is not a slowdown); hidden slowdowns of a
                 stage with slack (slower by 50-95 % of its slack to the slowest stage for 100-1000
                 iterations, kept only where the mean iteration rises by less than 4 %: the
                 bottleneck is elsewhere). Positives: 1-3 slowdowns (one in each of as many equal
                 parts after iteration 300, the first always, the others with chance 0.7; each at
                 least :data:`PP_SETTLE` iterations after its part's start, where a schedule change
                 may lie, and :data:`SPAN_CLEAR` before the next part's), each raising the mean
                 iteration time over its span by +12-45 % (:data:`PP_SLOWDOWN`) over the span's
                 healthy mean, for 60-800 iterations (:data:`PP_SLOW_ITERS`; at least 25 x (cv /
                 rise)^2, cv the healthy one, at most the part's room): one stage slower (``stage``,
                 60 %: a throttled GPU, a contended host; a stage with slack hides part of it) or
                 one link congested (``link``: its transfers both ways slower, by a factor that
                 varies 20-50 % from transfer to transfer; a stage where no link factor up to
                 :data:`PP_LINK_MAX` reaches the rise), the factor solved by bisection for the rise.
                 Labelled over the span by its mean rise (kinds ``stage`` / ``link``). Negatives:
                 the healthy series alone (imbalance, schedule changes, hiccups, hidden slowdowns).

The held-out family of the eleventh round (written and committed before that round's detector
changes, by someone who never ran the detector on it):

``lossy_link``   packet loss and interface flapping on the training fabric (MegaScale, section
                 3.6: NCCL's retransmit timeout and retry count tuned "for fast recovery under
                 link flapping"; section 6.3: "frequent network interface flapping" -- the
                 interface goes down for several seconds, every packet in flight is dropped,
                 "training speed drop", root cause "bad link quality between network card, AOC
                 cable and switch"; Falcon, section 3: inter-node RDMA is the least stable link,
                 "most prone to fail-slow incidents"; C4: slow links located from the
                 collectives).  An iteration is compute (a slowly wandering rate, AR(1) in
                 log space, sd 0.3-1.5 %, jitter 0.3-2 % and a warm-up) and exposed
                 collectives (10-40 % of it, :data:`LL_COMM`; 2-10 % jitter), plus
                 checkpoints (every 200-1000 iterations, 1-3 iterations at 1.5-4x) and
                 evaluations (every 100-1000 iterations, +1-4 mean iterations).  A
                 lost packet costs its iteration a go-back-N retransmission (the collectives
                 1-6x longer, :data:`LL_FAST`) or, for a tail loss (5-30 % of them), a
                 timeout of 1-4 mean iterations (:data:`LL_RTO`) doubled at each further retry
                 (one more with chance 0.25, at most 3: up to 7 timeouts): long iterations of
                 about 1.1-30x.  Healthy: losses are rare (the time they cost 0.3-2 % of the
                 mean, :data:`LL_HEALTHY_LOSS`), their chance wandering slowly (x0.37-2.7), with
                 blips (a port reset elsewhere, rerouting: 3-8 iterations with a loss chance of
                 0.2-0.5, one every 500-2000 iterations): a single long iteration, or a short
                 clump, is never an event.  Positives: 1-3 degraded links (one in each of as many
                 equal parts after iteration 300, the first always, the others with chance 0.7;
                 40 healthy iterations after each), each raising the mean iteration time over
                 its span by +12-45 % (:data:`NODE_SLOWDOWN`, up to :data:`SPAN_OVERSHOOT` more:
                 losses come whole) over the series' healthy mean: a lossy link (``lossy``:
                 losses costed as the healthy ones, their chance up to 0.35 per iteration, so
                 most iterations and the median stay healthy), a flapping interface (``flap``,
                 30 %, and wherever losses cannot reach +12 %: the link down 2-12 mean
                 iterations at a time, :data:`LL_FLAP_DOWN`, a flap's chance up to 0.25) or a
                 lossy link trained down to a lower rate (``downshift``, 25 %: every iteration
                 slower by 10-30 % of its collectives, at most a third of the rise, plus the
                 losses).  The chance steps up, or climbs linearly from the healthy one over
                 20-60 % of the span (at most 200 iterations: a degrading cable); it is solved
                 by bisection for the rise, over a span of 60-800 iterations
                 (:data:`NODE_SLOW_ITERS`) and at least 1.3 x 25 x (spread / rise)^2 (the span's
                 spread estimated from the loss or flap costs), drawn again (at most 8 times)
                 until the labelled span holds 25 x (its own sd / its rise)^2 iterations (the
                 rise five standard errors of its mean; the first part's last try: a flap, a
                 step, over the part's whole room).  Labelled from the first iteration
                 the degraded link slows to the last, by that span's mean rise (kinds
                 ``lossy`` / ``flap`` / ``downshift``).  Negatives: the healthy series alone
                 (rare losses, blips, checkpoints, evaluations).

The held-out family of the twelfth round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``gc_pause``     host-side time: Python's garbage collector in the training loop (the what-if
                 study of stragglers, section 5.4: a collection "can take 100s of
                 milliseconds", stops the world so that "new kernels cannot be started",
                 different processes collect at different times and one paused worker blocks
                 the whole job, more often the more workers; planned GC turns automatic GC off
                 and collects on every rank at once every N steps, and "too small a
                 GC-interval can lead to worse performance"; Megatron-LM's ``--manual-gc`` /
                 ``--manual-gc-interval``).  A step is 1-16 data-parallel ranks
                 (:data:`NODE_RANKS`), each with its device time (a slowly wandering rate, AR(1)
                 in log space, sd 0.3-1.5 %, jitter 0.3-2 %, a warm-up, 0.2-1 % per rank) and
                 its host (Python) time, 55-90 % of it (:data:`GC_HOST`): the host runs ahead,
                 so a pause costs the step only what exceeds the device's queued work; the step
                 waits for the slowest rank, plus the exposed all-reduce (5-25 %), checkpoints
                 (every 200-1000 steps, 1-3 steps at 1.5-4x) and evaluations (every 100-1000
                 steps, +1-4 mean steps, with many surviving objects).  Each rank's heap (its
                 own size, +-15 %) grows by 0-60 % over an epoch of 300-3000 steps and is
                 released at its end; a full collection pauses its rank for 0.3-2 mean steps
                 (:data:`GC_PAUSE`, 25 % spread) times its heap.  Automatic GC (60 % of the
                 series): CPython's rule, a full collection once the survivors since the last
                 one reach a quarter of the heap, each rank with log-normal survivors per step
                 (spread 0.3-1.2, :data:`GC_ALLOC_SIGMA`) so that collections come every 30-400
                 steps (:data:`GC_EVERY`; at least ranks x pause / 8 %), at irregular steps,
                 longer and rarer as the heap grows, plus young collections (host time 0.5-3 %
                 of a step).  Planned GC (40 %, :data:`GC_MANUAL_P`): every rank collects at
                 once every 50-500 steps, the pause longer (1-3 mean steps,
                 :data:`GC_MANUAL_PAUSE`): periodic long steps.  Positives: 1-3 slowdowns (one
                 in each of as many equal parts after iteration 300, the first always, the
                 others with chance 0.7; 40 healthy steps after each), each raising the mean
                 step time over its span by +12-45 % (:data:`NODE_SLOWDOWN`, up to
                 :data:`SPAN_OVERSHOOT` more: pauses come whole) over the series' healthy mean:
                 under automatic GC, thresholds lowered (``threshold``: ``gc.set_threshold``
                 from a library or a config, every rank's full and young collections up to
                 100x more often, at most one full collection a step; where the young ones
                 push the host past the device the whole level rises) or a leak of Python
                 objects (``leak``, 40 %: logged values or lists kept alive on every rank, the
                 heap growing linearly over the span by at most 7 base heaps, every leaked object a
                 survivor, so the pauses grow and come more often; freed at the span's end);
                 under planned GC, ranks whose planned GC was switched off (``desync``: 1-4
                 ranks, at most half, back on automatic GC with their young collections, up to
                 one full collection a step: their pauses land on other steps than everybody
                 else's).  The rate steps up, or climbs linearly over 20-60 % of the span (at
                 most 200 steps; a leak climbs by itself); the size is solved by bisection for
                 the rise over a span of 60-800 steps (:data:`NODE_SLOW_ITERS`) and at least 1.3
                 x 25 x (spread / rise)^2, drawn again (at most 8 times) until the labelled
                 span holds 25 x (its own sd / its rise)^2 steps (the first part's last try:
                 the mode's kind on every rank, a step, over the part's whole room).  A rank's
                 collections move inside the span (its clock resumes at the span's end), so a
                 few of the span's steps are faster.  Labelled from the first step that changes
                 to the last, by that span's mean rise (kinds ``threshold`` / ``leak`` /
                 ``desync``).  Negatives: the healthy series alone (pauses, young collections,
                 checkpoints, evaluations).

The held-out family of the thirteenth round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``dispatch``     host dispatch-bound steps (the what-if study of stragglers, section 6: CPU
                 work is "overlapped with GPU ones, allowing their latency to be
                 hidden.  However, the overlap is not always perfect and delays the launch of
                 the next operation"; section 5.4: forward compute is launched from Python,
                 backward from C++).  A step is 1-16 data-parallel ranks (:data:`NODE_RANKS`;
                 the step waits for the slowest, plus the exposed all-reduce, 5-25 %,
                 checkpoints every 200-1000 steps and evaluations every 100-1000); each rank
                 runs three phases (forward, backward 1.8-2.2x, optimizer 5-30 % of the
                 forward), each of four kernel groups whose shares of the phase's device and
                 host time are drawn apart (Dirichlet, :data:`HD_CHUNK_CONC`).  The host
                 launches a group's kernels at an even pace over its dispatch time, the
                 device runs each once it is launched (a fluid launch queue) and the phase
                 ends at a synchronisation (the loss read back, the gradient scaler's check,
                 the step's end): a phase lasts the largest, over the groups' starts and
                 ends, of the host time to launch up to there plus the device time from there
                 on (:func:`_phase_busy`).  Healthy: the host time 35-85 % of the device time
                 in the forward, 10-40 % in the backward, 30-100 % in the optimizer
                 (:data:`HD_HOST_FWD` ...), with 1-6 % jitter per rank, step and phase,
                 mostly hidden (seeds 3-4: in half the series fewer than 3 % of the
                 rank-steps lose over 1 % to the host, in a quarter half of them or more do);
                 the device time wanders (AR(1) in log space, sd 0.3-1.5 %, jitter 0.3-2 %, a
                 warm-up, 0.2-1 % per rank); host spikes (one phase's host time 2-8x, chance
                 1/600-1/100 per rank and step); the series cut in 1-3 parts, a part after
                 the first running another batch shape with chance 0.6 (the device time
                 0.7-1.04x the previous part's, the host time unchanged, so the margin
                 moves); 0-3 CPU neighbours that come and go on one rank for 50-600 steps
                 (its host 10-100 % slower, in bursts) kept only where the mean step over the
                 episode rises by less than 3 % (halved up to 4 times, else dropped).
                 Positives: 1-3
                 slowdowns of the host side (one in each part, the first always, the others
                 with chance 0.7; 200 steps after a batch-shape change and before the next
                 one, else 40 healthy steps after), each raising the mean step time over its
                 span by +12-45 % (:data:`NODE_SLOWDOWN`, up to :data:`SPAN_OVERSHOOT` more) over
                 the span's healthy mean: a co-located process on 1-4 ranks, at most half
                 (``neighbour``: their host ``1 + g x load`` slower, the load in bursts on
                 20-100 % of the steps, runs of 1-20 steps, fluctuating 20-50 %), CFS quota
                 throttling on as many ranks' cgroups (``quota``: each time the host has run
                 ``1 - g`` of a 100 ms period it is stalled for the rest of it, the period in
                 steps from the series' step time in seconds: lumpy where steps are short), a
                 capped CPU frequency on a node's ranks (``freq_cap``: the host ``1 + g``
                 slower) or metrics that sync every 1-10 steps (``sync``, every rank: ``g``
                 mean steps of host work in small kernels after the optimizer, then read
                 back; intermittent long steps where the period is over 1).  A neighbour or a
                 frequency cap steps up or climbs linearly over 20-60 % of the span (at most
                 200 steps); a quota or a sync steps.  The size ``g`` is solved by bisection
                 for the rise (the host slowdown costs the step only once it crosses the
                 device time, so the rise is non-linear in ``g``) over a span of 60-800 steps
                 (:data:`NODE_SLOW_ITERS`) and at least 1.3 x 25 x (spread / rise)^2, drawn
                 again (at most 8 times) until the labelled span holds 25 x (its own sd / its
                 rise)^2 steps and stands +12 % above the healthy steps of the 200 before and
                 after it too (their 4 longest left out; the first part's last try: a sync on
                 every step, over the part's whole room).  Labelled from the first step that
                 changes to the last, by the span's mean rise over its healthy mean (kinds
                 ``neighbour`` / ``quota`` / ``freq_cap`` / ``sync``).  Negatives: the healthy
                 series alone (host spikes, hidden neighbours, batch-shape changes,
                 checkpoints, evaluations).

The held-out family of the fourteenth round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``moe``          mixture-of-experts load imbalance under expert parallelism (a learnt gate
                 routes each token to its experts; the dispatch all-to-all, the expert
                 compute and the combine all-to-all wait for the expert-parallel rank that
                 holds the most tokens; a capacity factor drops the tokens beyond capacity;
                 an auxiliary balancing loss keeps the gate near even).  8-64 experts a layer
                 (:data:`ME_EXPERTS`) on 2-16 ranks (never more ranks than experts), 1-2 groups
                 of MoE layers with a router each, 256-4096 token assignments per expert, layer
                 and step at balance (:data:`ME_TOKENS`).  Each step's batch is a mixture of
                 4-16 data domains (Dirichlet, concentration 3-50: some batches come mostly
                 from one or two domains), each domain routing by its own preferences (logit
                 sd 0.3-1); the gate's bias tilts the mixture and wanders about balance
                 (sd 0.02-0.15), pulled back by the balancing loss with a time constant of
                 20-300 steps (:data:`ME_BALANCE_TAU`); an expert's count is normal about its
                 mean (Poisson's spread).  Routing: dropless (half the series), or a capacity
                 factor of 1-2 (:data:`ME_CAPACITY`) that cuts each expert's tokens, the
                 buffers padded to the capacity in half of those (:data:`ME_PAD_P`: the time
                 then follows the capacity, not the load).  A layer lasts a fixed share
                 (5-20 %: gate, permutation, latency) plus the rest times the busiest rank's
                 load times its cost per token (0.2-1 % jitter per rank and step) over the
                 balanced load; the MoE layers are 30-70 % of a balanced step
                 (:data:`ME_SHARE`), the rest dense compute (a wandering rate, jitter 0.3-2 %,
                 a warm-up), plus the exposed all-reduce (5-20 %), checkpoints (every
                 200-1000 steps, 1-3 steps at 1.5-4x) and evaluations (every 100-1000 steps,
                 +1-4 mean steps).  Healthy: the step time follows the batch's content (the
                 largest expert's share over the mean share, less 1, "MaxVio": its median
                 over the steps 0.23-2.35 across the negatives of seeds 0-11; a wide,
                 right-skewed step time), capacity-bound steps, 0-3 gate drifts
                 (one expert a layer pushed up by 0.2-1.5 logits over 20-200 steps and pulled
                 back by the balancing loss; kept where the mean step over the drift rises by
                 less than 3 %, halved up to 4 times), and the series cut in 1-3 parts, a
                 part after the first starting with a planned restart with chance 0.6
                 (downtime 60-900 s, a warm-up, another expert-parallel size or capacity
                 factor; its mean busy time 0.85-1.04x the previous part's).  Positives: 1-3
                 slowdowns (one in each part, the first always, the others with chance 0.7;
                 200 steps after a restart and before the next, else 40 healthy steps after),
                 each raising the mean step time over its span by +12-45 %
                 (:data:`NODE_SLOWDOWN`, up to :data:`SPAN_OVERSHOOT` more) over the span's
                 healthy mean, where dropless: the router collapsing onto 1-3 experts a layer
                 (``collapse``: the most popular ones at its start, their bias raised over
                 20-400 steps), the balancing loss switched off at a restart (``aux_off``: the
                 gate's updates are no longer pulled back and walk away from balance, ``g``
                 times the healthy ones) or a data domain that concentrates the tokens
                 (``domain``: 30-100 % of every batch from a domain whose preferences have an
                 sd ``g``, the balancing loss undoing 20-70 % of its skew with its time
                 constant); where capped: the capacity factor raised at a restart
                 (``capacity``: ``1 + g`` times; padded buffers cost it on every step,
                 unpadded ones only where the routing is skewed); anywhere: one rank's link
                 or device slower (``slow_rank``: its cost per token ``1 + g`` times, seen in
                 a step where its load times its cost is the largest).  Under a capacity a
                 skew costs no time beyond it (the tokens are dropped), so the kinds that
                 skew the routing are drawn where it is dropless.  A configuration change
                 (``aux_off``, ``capacity``) comes with a restart at its start and another
                 at its end that restores the old configuration (the counterfactual healthy
                 series has both restarts); a collapse or a switched-off balancing loss
                 returns to balance over 1-30 steps after the span.  A domain or a slow rank
                 steps up or climbs linearly over 20-60 % of the span (at most 200 steps).
                 The size ``g`` is solved by bisection for the rise over a span of 60-800
                 steps (:data:`NODE_SLOW_ITERS`) and at least 1.3 x 25 x (cv / rise)^2, drawn
                 again (at most 8 times) until the labelled span holds 25 x (its own sd / its
                 rise)^2 steps and stands +12 % above the healthy steps of the 200 before and
                 after it (their 4 longest left out; the first part's last try: a slow rank,
                 a step, over the part's whole room).  Labelled from the first step that
                 changes to the last, by the span's mean rise over its healthy mean (kinds
                 ``collapse`` / ``aux_off`` / ``domain`` / ``capacity`` / ``slow_rank``).
                 Negatives: the healthy series alone.

The held-out family of the fifteenth round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``hw_queue``     CUDA hardware-queue false dependencies (the what-if study of stragglers,
                 section 5.5: reduce-scatter kernels "block other kernels (that do not depend
                 on the reduce-scatter kernel) from being launched", false dependencies of
                 "unrelated kernels sharing the same CUDA hardware queue", alleviated by more
                 CUDA_DEVICE_MAX_CONNECTIONS, and the problem comes and goes "as we evolve our
                 model and framework").  A step is the forward and optimizer compute (40-60 %
                 and 3-12 % of the backward's, :data:`HQ_FORWARD`) plus the backward pass over
                 8-32 gradient buckets (:data:`HQ_BUCKETS`; their shares of the compute and of
                 the bytes drawn apart, Dirichlet): each bucket's compute runs on the compute
                 queue, its reduce-scatter on the communication stream once its gradients are
                 ready and the previous one is done (0.3-0.85 of the backward compute in all
                 at the nominal bandwidth, :data:`HQ_COMM`); where a reduce-scatter shares a
                 hardware queue with the compute launched after it, that compute waits for it
                 to finish (:func:`_backward`).  The device's rate wanders (AR(1) in log
                 space, jitter, a warm-up), each bucket's compute has 0.5-2 % jitter, the
                 bandwidth 2-10 % per step and bucket and congestion spikes (1-5 steps at
                 1/1.5-1/4 of it, chance 1/400-1/80 per step: exposed communication), plus
                 checkpoints (every 200-1000 steps, 1-3 steps at 1.5-4x) and evaluations
                 (every 100-1000 steps, +1-4 mean steps).  Healthy: the reduce-scatters hide
                 behind the compute but the last one (in the negatives of seeds 0-11 without a
                 shared queue, medians over the series: 2.2 % of the steps lose more than 1 %
                 to communication beyond the last reduce-scatter, 0.56 % of the time on
                 average); a configuration that leaves 5-40 % of the buckets' reduce-scatters
                 on the compute queue from the start (30 %, :data:`HQ_SHARED_P`: partly
                 exposed throughout, a level; 0.6-27 % of the time, median 11 %, in those
                 negatives); the series cut in 1-3 parts, a part after the first starting with
                 a planned restart with chance 0.6 (downtime 60-900 s, a warm-up, the buckets'
                 bytes 0.7-1.4x, kept where the part's mean step rises by less than 4 %, the
                 change halved until).
                 Positives: 1-3 slowdowns (one in each part, the first always, the others with
                 chance 0.7; 200 steps after a restart and before the next, else 40 healthy
                 steps after), each raising the mean step time over its span by +12-45 %
                 (:data:`NODE_SLOWDOWN`, up to :data:`SPAN_OVERSHOOT` more: buckets block whole)
                 over the span's healthy mean: fewer connections after a restart
                 (``connections``: the reduce-scatters of a share ``g`` of the buckets, at
                 random, land on the compute queue), another kernel order after a framework
                 update (``order``: those of a run of ``g`` of the buckets in a row), both
                 with a restart at the span's start and another at its end that restores the
                 old configuration (the counterfactual healthy series has both restarts);
                 gradient buckets that grow (``bucket``: 25-100 % of them ``1 + g`` times
                 the bytes, more parameters unfrozen or a larger bucket) or a slower link
                 (``link``: the bandwidth ``1 / (1 + g)``), each a step or a climb over 20-60
                 % of the span (at most 200 steps): on separate queues hidden until the
                 reduce-scatters outgrow the compute, so the rise is non-linear in ``g``.
                 The size ``g`` is solved by bisection for the rise over a span of 60-800
                 steps (:data:`NODE_SLOW_ITERS`) and at least 1.3 x 25 x (cv / rise)^2, drawn
                 again (at most 8 times) until the labelled span holds 25 x (its own sd / its
                 rise)^2 steps and stands +12 % above the healthy steps of the 200 before and
                 after it (their 4 longest left out; the first part's last try: a slower
                 link, a step, over the part's whole room).  Labelled from the first step
                 that changes to the last, by the span's mean rise over its healthy mean
                 (kinds ``connections`` / ``order`` / ``bucket`` / ``link``).  Negatives:
                 the healthy series alone.

The held-out family of the sixteenth round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``compile``      torch.compile: graph compilation, recompile thrash, graph breaks and eager
                 fallback (host-side, at compile time: TorchDynamo guards each compiled graph
                 on its inputs' shapes and on the Python values it specialised on; a guard
                 that fails compiles a new graph, a stall of seconds to minutes, far longer
                 than a step; a frame keeps at most ``cache_size_limit`` graphs and past it
                 runs eagerly, without fusion or CUDA graphs; a graph break splits a graph
                 into smaller ones).  A step is 1-16 data-parallel ranks (:data:`NODE_RANKS`;
                 the step waits for the slowest rank's compute, and for its compile) running
                 a batch of one of 2-8 sequence-length buckets (:data:`CP_BUCKETS`; lengths
                 doubling up to the longest, their frequencies Dirichlet(1), so some are rare;
                 a fixed token budget per batch: the longest costs 1 + 0.1-1 times the linear
                 cost, :data:`CP_ATTN`, the attention halving with each shorter bucket): its
                 compute (the device's rate wandering, AR(1) in log space, jitter 0.3-2 %, a
                 warm-up, 0.2-1 % per rank) and host time (2-10 % of it: guards, launches;
                 5-20 % jitter), the exposed all-reduce (5-20 %), checkpoints (every 200-1000
                 steps, 1-3 steps at 1.5-4x) and evaluations (every 100-1000 steps, +1-4 mean
                 steps).  Healthy: after the job's start and after every restart the first
                 batch of each shape compiles its graph (cold: 2-60 mean steps,
                 :data:`CP_COMPILE`, each graph's own 30 % apart, each rank's 5-20 %, the
                 step waiting for the last; after a restart that keeps the shapes, from the
                 on-disk cache: 15-50 % of that, :data:`CP_CACHED`), and so do the first
                 partial batch of an epoch (drop_last off in half the series; epochs of
                 300-3000 steps) and the first evaluation: bursts of compiles at the start
                 and at each restart, single ones wherever a rare shape or an epoch's end
                 first comes; under dynamic shapes (40 %, :data:`CP_DYNAMIC_P`) the second
                 shape compiles a dynamic graph that serves every later one, 2-6 % slower
                 (:data:`CP_DYNAMIC`); the series cut in 1-3 parts, a part after the first
                 starting with a planned restart with chance 0.6 (downtime 60-900 s, a
                 warm-up; in half of them a new micro-batch count: every shape new, compiled
                 cold, the busy time 0.85-1.04x).  Positives: 1-3 slowdowns (one in each
                 part, the first always, the others with chance 0.7; 200 steps after a
                 restart and before the next, else 40 healthy steps after), each raising the
                 mean step time over its span by +12-45 % (:data:`NODE_SLOWDOWN`, up to
                 :data:`SPAN_OVERSHOOT` more) over the span's healthy mean: the cache limit hit
                 (``eager``: one shape's graph, a shape drawn as often as its batches, or
                 every shape's falls back to eager, its compute and host time ``1 + g``
                 times, at most 2x, until a restart at the span's end compiles them again),
                 recompile thrash (``thrash``: a guard on a Python value that keeps changing,
                 the cache limit raised, recompiles every ``1 / g`` steps, each recompile
                 1.5-12 mean steps, :data:`CP_THRASH_STALL`: periodic long steps, most steps
                 healthy) or a graph break that a code change brings at a restart
                 (``graph_break``: every graph compiled cold after that restart, in the
                 healthy series too; the batches of the shapes from one drawn as often as its
                 batches up take the broken path, ``1 + g`` times slower, at most 2x, a step
                 or a climb over 20-60 % of the span, at most 200 steps, as more batches take
                 it; its fix at a restart at the span's end).  The counterfactual healthy
                 series has the same restarts.  The size ``g`` is solved by bisection for the
                 rise over a span of 60-800 steps (:data:`NODE_SLOW_ITERS`) and at least 1.3 x
                 25 x ((cv / rise)^2 + the thrash's period), cv that of the healthy steps that
                 compile nothing, drawn again (at most 8 times) until the labelled span holds
                 25 x (its own sd / its rise)^2 steps and stands +12 % above the healthy steps
                 of the 200 before it, and of the 200 after it where no restart follows (their
                 4 longest left out; the first part's last try: every shape eager, the largest
                 rise, over the part's whole room).  Labelled from the first step that
                 changes to the last, by the span's mean rise over its healthy mean (kinds
                 ``eager`` / ``thrash`` / ``graph_break``).  Negatives: the healthy series
                 alone.

The held-out family of the seventeenth round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``power``        node power capping: the GPUs of a node share a power budget and a controller
                 (a GPU power brake, node-level capping) acting on its own period of 0.1-1 s
                 (:data:`PW_TICK_S`) lowers their clock while the node's draw exceeds the cap,
                 so the clock-bound work slows by the share of it the cap binds; every rank of
                 a capped node slows together.  A job is 1-16 data-parallel ranks
                 (:data:`NODE_RANKS`) on nodes of 1-8 (:data:`PW_NODE`); each rank's record is
                 its busy time (compute and host, the per-rank signal; the wait for the
                 slowest node is not in it): its compute (a wandering rate, AR(1) in log space,
                 jitter 0.3-2 %, a warm-up, 0.2-1 % per rank) of which 40-90 % is a heavy block
                 of large matmuls at the step's end (:data:`PW_HEAVY`), the rest memory-bound
                 (the clock costs it nothing), host time (2-10 %), checkpoints (every 200-1000
                 steps, 1-3 steps at 1.5-4x) and evaluations (every 100-1000 steps, +1-4 mean
                 steps).  The heavy block draws 0.92-1.0 of the cap at full clock
                 (:data:`PW_DRAW`; each node 1 % apart, 0.5-2 % per step, heavier batches 1.05-1.2x
                 on 2-10 % of a node's steps); where it exceeds the cap the clock falls to the
                 ``f`` at which ``static + (1 - static) f^kappa`` of the draw meets it (static
                 0.2-0.35, kappa 2-3, at least 0.3, :class:`_Nodes`).  The controller decides at
                 its ticks (each node its own phase): at a heavy block's start the throttle is
                 on where its last tick fell in a heavy block (its place in the step's cycle),
                 else it comes on at the next tick, so the share of the block it binds follows
                 the controller's phase against the step (the job's unthrottled clock): about
                 every block where the step is long, a beat (a slow quasi-periodic modulation)
                 where step and period are close, nothing new where they are commensurate.
                 Healthy: brief binding in heavy steps (the throttle costing a rank-step over 1
                 % in 0.3-49 % of the rank-steps, median 4 %, across the negatives of seeds
                 0-11; 0.01-1.1 % of the time); the inlet temperature following the day or the
                 chillers (a period of 1-24 h, :data:`PW_WAVE_S`: the clock-bound time +-1-3 %,
                 the draw +-0.5-1.5x that); a node whose GPUs are a slower bin by 2-4 % from the
                 start (chance 0.3); the series cut in 1-3 parts, a part after the first
                 starting with a planned restart with chance 0.6 (downtime 60-900 s, a warm-up,
                 another batch: the busy time 0.85-1.04x).  Positives: 1-3 slowdowns (one in
                 each part, the first always, the others with chance 0.7; 200 steps after a
                 restart and before the next, else 40 healthy steps after), each raising the
                 mean busy time of the capped node's ranks over its span by +12-45 %
                 (:data:`NODE_SLOWDOWN`, up to :data:`SPAN_OVERSHOOT` more) over their healthy
                 mean: a facility's demand response (``demand``: one node's cap divided by ``1
                 + g``, at most 5x lower, for the span, then back), a failed power supply
                 (``psu``: the same until a restart at the span's end), a configuration change
                 at a restart (``config``: every node's draw ``1 + g`` times, at most 2x, larger
                 matmuls; its revert at a restart at the span's end; every rank named) or a
                 node's cooling degrading (``cooling``: its draw climbing linearly to ``1 + g``
                 times, at most 2x, over 30-100 % of the span as the inlet warms).  Below the
                 cap nothing shows, so the rise is non-linear in ``g``.  The counterfactual
                 healthy series has the same restarts.  The size ``g`` is solved by bisection
                 for the rise over a span of 60-800 steps (:data:`NODE_SLOW_ITERS`) and at least
                 1.3 x 25 x (cv / rise)^2 (cv: the noisiest node's mean busy time), drawn again
                 (at most 8 times) until the labelled span holds 25 x (its own sd / its rise)^2
                 steps and stands +12 % above the healthy steps of the 200 before it, and of the
                 200 after it where no restart follows (their 4 longest left out; the first
                 part's last try: a demand response at the smallest rise over the part's whole
                 room).  Labelled from the first step that changes to the last, by the span's
                 mean rise, with the capped node's ranks (kinds ``demand`` / ``psu`` /
                 ``config`` / ``cooling``).  Negatives: the healthy series alone.

The held-out family of the eighteenth round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``numa``         host CPU placement: each rank's training process (its main thread, its
                 data-loader workers, the NCCL proxy thread) is pinned by the launcher to the
                 cores and memory of its GPU's socket, and the host's work is a share of the
                 step, so where the placement or the host's CPU changes, the ranks of that
                 node slow together.  A job is 1-16 data-parallel ranks (:data:`NODE_RANKS`) on
                 nodes of 1-8 (:data:`NU_NODE`); each rank's record is its busy time (the wait
                 for the slowest node is not in it): its compute (a wandering rate, AR(1) in
                 log space, jitter 0.3-2 %, a warm-up, 0.2-1 % per rank), its host work on the
                 step's path (Python dispatch, the batch handed over, pinned-memory staging:
                 2-30 % of the compute, :data:`NU_HOST`, 3-15 % jitter; small where the job
                 is device-bound), its exposed host-to-device copies (1-6 %), or the loader's
                 time per batch where that is longer (its workers' CPU time over their count:
                 0.3-0.75 of the mean step, :data:`NU_FEED`, so hidden while healthy; 2-10
                 workers per rank, fewer where the node's demand would pass 0.9 of its 32-192
                 cores), plus checkpoints (every 200-1000 steps, 1-3 steps at 1.5-4x) and
                 evaluations (every 100-1000 steps, +1-4 mean steps).  Healthy: OS
                 housekeeping (a stall of 2-6 % of a mean step on a rank with chance
                 1/50-1/10 per step), transparent-huge-page compaction (0.2-2 mean steps,
                 chance 1/3000-1/500), rank 0 owning the logging / checkpoint thread (its host
                 work 1.3-2.5x from the start, chance 0.5), shared-node activity following the
                 day or cron (a period of 1-24 h, each node's host work +-10-50 %, at most 3 %
                 of the mean step), the series cut in 1-3 parts, a part after the first
                 starting with a planned restart with chance 0.6 (downtime 60-900 s, a
                 warm-up, another loader worker count: the loader's time per batch with it,
                 the busy time 0.97-1.04x).  Positives: 1-3 slowdowns (one in each part, the
                 first always, the others with chance 0.7; 200 steps after a restart and
                 before the next, else 40 healthy steps after), each raising the mean busy
                 time of the slowed node's ranks over its span by +12-45 %
                 (:data:`NODE_SLOWDOWN`, up to :data:`SPAN_OVERSHOOT` more) over their healthy
                 mean: the affinity lost at a restart (``affinity``: a launcher or container
                 update, the node's processes float across sockets, their host work, loader
                 and copies read remote memory and cross the inter-socket link, ``1 + g``
                 times, at most 2x, until a restart at the span's end pins them again),
                 automatic NUMA balancing migrating pages (``balancing``: on one node, in
                 bursts of 3-40 steps, :data:`NU_BURST`, each making the CPU work and copies
                 1.5-4x, a step in a burst where its burst's key is below the rate ``g``,
                 the rate climbing linearly over 30-100 % of the span), a CPU frequency
                 governor / C-state change after a BIOS or kernel update at a restart
                 (``governor``: every node's CPU work ``1 + g`` times, at most 2.5x, the DMA
                 copies not; its revert at a restart at the span's end; every rank named) or
                 a co-scheduled CPU job (``cojob``: on one node, a demand of ``g`` times its
                 cores, at most 8: nothing but the caches, ``1 + 0.15 min(1, g)``, while the
                 cores suffice, then the CPU work time-sliced, ``demand + g`` times, until
                 the loader binds the step).  Where the host's share is small the CPU's
                 slowdowns hide behind the compute (and the loader's behind the step), so
                 the rise is non-linear in ``g`` and capped by the host's share: a kind that
                 cannot reach its rise is drawn again.  The counterfactual healthy series has
                 the same restarts.  The size ``g`` is solved by bisection for the rise over
                 a span of 60-800 steps (:data:`NODE_SLOW_ITERS`) and at least 1.3 x 25 x (cv /
                 rise)^2 (cv: the noisiest node's mean busy time), drawn again (at most 8
                 times) until the labelled span holds 25 x (its own sd / its rise)^2 steps
                 and stands +12 % above the healthy steps of the 200 before it, and of the 200
                 after it where no restart follows (their 4 longest left out; the first
                 part's last try: a co-scheduled job at the smallest rise over the part's
                 whole room).  Labelled from the first step that changes to the last, by the
                 span's mean rise, with the slowed node's ranks (kinds ``affinity`` /
                 ``balancing`` / ``governor`` / ``cojob``).  Negatives: the healthy series
                 alone.

The held-out family of the nineteenth round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``rollout``      reinforcement-learning steps bound by generation (RLHF / GRPO with the policy's
                 generation engines colocated on the training ranks): each step decodes a batch of
                 prompts on every generation worker until the longest response in its batch ends,
                 gathers the responses, then trains on them.  A job is 1-16 ranks
                 (:data:`NODE_RANKS`) in generation workers of 1-8 (:data:`RO_TP`, an engine's
                 tensor parallelism); each rank's record is its busy time (the wait for the
                 slowest worker at the gather is not in it): its worker's generation (50-85 % of
                 the mean busy time, :data:`RO_GEN`)
                 and its share of the training (the rest, growing with the step's generated tokens),
                 both at the device's rate (a wandering rate, AR(1) in log space, jitter 0.3-2 %, a
                 warm-up, 0.2-1 % per rank), host work (2-8 %), the weight sync into its engine
                 (every 1-10 steps, 3-15 % of a mean step, :data:`RO_SYNC`), checkpoints (every
                 200-1000 steps, 1-3 steps at 1.5-4x) and validation rollouts (every 100-1000 steps,
                 +1-4 mean steps).  A worker decodes 32-256 responses a step (:data:`RO_SEQS`) of
                 log-normal lengths (median 1/16-1/4 of the maximum length, spread 0.5-1.2, capped
                 at the maximum): its decode iterations are the longest response's length (the
                 largest of its draws, drawn as an order statistic), each costing the weights' read
                 plus the KV cache's (0.2-1 of it at a full cache, :data:`RO_KV`); its cache holds
                 the prompts (0.05-0.5 of the maximum length) and 50-90 % of the generated tokens at
                 its peak, the cache sized so that the healthy demand's median is 60-100 % of it
                 (each worker 3 % apart); a batch whose demand exceeds the cache preempts sequences
                 and recomputes them, ``x (1 + x)`` times 0.5-2 times the mean longest response's
                 decode iterations (``x``: the demand over the cache, minus 1, a convex cost,
                 :data:`RO_PREEMPT`).  Healthy: the ceiling mode (the longest response capped at the
                 maximum in a share of the steps, 0-100 % by the lengths' median and spread), heavy
                 batches that preempt, the policy's response length drifting (its median x
                 exp(-0.3..+0.6) along ``1 - exp(-t / tau)``, tau 0.2-1 of the series,
                 :data:`RO_DRIFT`; halved until the workers' mean busy time, over 200 steps, moves
                 by less than 3 % over the whole series, :data:`RO_DRIFT_RISE`, so it stays below
                 the rule over any span, labelled or not), the weight sync and the validation
                 rollouts, the series cut in 1-3 parts, a part after the first starting with a
                 planned restart with chance 0.6 (downtime 60-900 s, a warm-up, another batch: the
                 busy time 0.97-1.04x).  Positives: 1-3 slowdowns (one in each part, the first
                 always, the others with chance 0.7; 200 steps after a restart and before the next,
                 else 40 healthy steps after), each raising the mean busy time of one worker's ranks
                 over its span by +12-45 % (:data:`NODE_SLOWDOWN`, up to :data:`SPAN_OVERSHOOT`
                 more) over their healthy mean: a worker whose KV cache is smaller after a restart
                 (``cache``: another memory fraction, the cache ``1 / (1 + g)``, at most 8x smaller:
                 preemptions begin earlier, until a restart at the span's end), a co-located
                 reward-model server taking the worker's compute in episodes (``reward``: runs of
                 3-40 steps, :data:`RO_EPISODE`, each making the decode 1.5-4x slower, a step in an
                 episode where its run's key is below the rate ``g``, the rate climbing linearly
                 over 30-100 % of the span), a degraded worker (``degraded``: its decode ``1 + g``
                 times slower, at most 3x) or its weight-sync path degraded (``sync``: a link
                 trained down, its weight loads ``1 + g`` times longer, at most 61x: intermittent
                 where the sync is not every step).  The preemptions make the rise non-linear in
                 ``g``.  The counterfactual healthy series has the same restarts.  The size ``g`` is
                 solved by bisection for the rise over a span of 60-800 steps
                 (:data:`NODE_SLOW_ITERS`) and at least 1.3 x 25 x (cv / rise)^2 (cv: the noisiest
                 worker's mean busy time), drawn again (at most 8 times) until the labelled span
                 holds 25 x (its own sd / its rise)^2 steps and stands +12 % above the healthy steps
                 of the 200 before it, and of the 200 after it where no restart follows (their 4
                 longest left out; the first part's last try: a degraded worker at the smallest rise
                 over the part's whole room).  Labelled from the first step that changes to the
                 last, by the span's mean rise, with the worker's ranks (kinds ``cache`` /
                 ``reward`` / ``degraded`` / ``sync``).  Negatives: the healthy series alone.

The held-out family of the twentieth round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``fabric``       inter-node collectives over a two-tier (leaf / spine) fabric with ECMP path
                 hashing: when a communicator is created (at the job's start and at every
                 restart) each flow of its ring all-reduce is hashed onto one of its leaf's
                 4-16 spine uplinks (:data:`FB_UPLINKS`); flows that share an uplink share its
                 bandwidth, and the ring moves at its slowest flow, so the collective's time is
                 set by the most loaded uplink on the ring (a balls-into-bins maximum: a
                 discrete, heavy-ish level).  A job is 2-16 ranks (:data:`FB_RANKS`) on nodes of
                 1-8 (at least two nodes), 1-4 of its nodes under a leaf (at least two leaves,
                 :data:`FB_LEAF`), the ring over the nodes leaf by leaf, so each leaf sends one
                 ring edge to the next: 2-16 flows (NCCL channels, each its own queue pair and
                 source port, :data:`FB_CHANNELS`) hashed onto its uplinks; an uplink carries the
                 job's even share of it (at least one flow at the NIC-bound rate) with a headroom
                 of 1-2x (:data:`FB_HEADROOM`); a leaf's factor is its busiest uplink's
                 ``max(1, flows / (capacity x (1 - other jobs' share)))``, the ring's the largest
                 over the leaves.  Each rank's record is its busy time: its compute (a wandering
                 rate, AR(1) in log space, jitter 0.3-2 %, a warm-up, 0.2-1 % per rank) and host
                 time (2-10 %), plus the ring all-reduce's exposed part, the same on every rank:
                 the collective (10-60 % of the compute at its NIC-bound rate, :data:`FB_COMM`,
                 times the ring's factor, 2-8 % jitter from adaptive routing, incast
                 micro-bursts of +30-200 % with chance 1/400-1/80 a step) is hidden behind the
                 backward up to 20-70 % of the compute (:data:`FB_HIDE`) but for its last
                 bucket (5-25 % of it, :data:`FB_TAIL`), so the exposed share varies per job;
                 plus checkpoints (every 200-1000 steps, 1-3 steps at 1.5-4x) and evaluations
                 (every 100-1000 steps, +1-4 mean steps).  Healthy: the start's hashes (any
                 level), other jobs' light traffic on every uplink (a share of 1-10 % of its
                 capacity, each wandering, AR(1) in log space, sd 0.1-0.5, at most 30 %,
                 :data:`FB_BG`), the micro-bursts and jitter, the series cut in 1-3 parts, a
                 part after the first starting with a planned restart with chance 0.6
                 (downtime 60-900 s, a warm-up, the same batch) that re-draws every hash: the
                 new level is healthy where the mean busy time rises by less than 4 %
                 (:data:`FB_MOVE_HEALTHY`; it may fall by any amount), drawn again otherwise in
                 a negative (at most 8 times, then the old hashes are kept).  Positives: a
                 restart whose new hashes raise the mean busy time of every rank from the
                 restart to the next (or the end) by +12-55 % (:data:`FB_REHASH_MAX`) over the
                 old hashes kept, decidably and visibly (below), is labelled (``rehash``: a run
                 resumed slower; never right after another, its parts get no other slowdown);
                 a move between 4 and 12 %, or one not decidable, is drawn again.  Then 1-3
                 slowdowns (one in each part not taken, the first always, the others with
                 chance 0.7; 200 steps after a restart and before the next, else 40 healthy
                 steps after), each raising the mean busy time of every rank (the ring is the
                 whole job's) over its span by +12-45 % (:data:`NODE_SLOWDOWN`, up to
                 :data:`SPAN_OVERSHOOT` more), on one uplink that carries the job's flows: a
                 neighbour job's heavy traffic (``neighbour``: ``g`` flows, at most 8, times
                 0.5-2 per episode, sharing the uplink fairly, in episodes of 2-300 steps,
                 log-uniform, :data:`FB_EPISODE`, on 10-80 % of them), the uplink down until it
                 is repaired (``down``: the ECMP group shrinks and the leaf re-hashes the job's
                 flows over the uplinks left, the other jobs' traffic on it, its light share
                 and ``g`` more, at most a capacity, spread over them: a discrete rise, most
                 often none) or a degraded uplink (``degraded``: its rate ``1 / (1 + g)``, at
                 most 16x lower, climbing linearly over 30-100 % of the span as the optics
                 degrade, and errors: a step retransmits with chance 0.05 ``g``, at most 0.5,
                 costing 0.5-3 NIC-bound collectives).  The hidden share makes the rise
                 non-linear in ``g``: a kind that cannot reach its rise is drawn again.  The
                 size ``g`` is solved by bisection for the rise over a span of 60-800 steps
                 (:data:`NODE_SLOW_ITERS`) and at least 1.3 x 25 x (cv / rise)^2, drawn again
                 (at most 8 times) until the labelled span holds 25 x (its own sd / its rise)^2
                 steps and stands +12 % above the healthy steps of the 200 before it and of the
                 200 after it (their 4 longest left out; the first part's last try: a degraded
                 uplink at the smallest rise over the part's whole room).  Labelled from the
                 first step that changes to the last, by the span's mean rise, with every rank
                 (kinds ``neighbour`` / ``down`` / ``degraded`` / ``rehash``).  Negatives: the
                 healthy series alone.

The held-out family of the twenty-first round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``nvme``         optimizer states offloaded to the node's local NVMe drive (ZeRO-Infinity style):
                 each step's optimizer streams the states of the node's ranks through its drive, a
                 read and a write of the same volume.  A job is 1-16 ranks (:data:`NODE_RANKS`) on
                 nodes of 1-8 (:data:`NV_NODE`), the ranks of a node on one drive; each rank's
                 record is its busy time: its compute (a wandering rate, AR(1) in log space, jitter
                 0.3-2 %, a warm-up, 0.2-1 % per rank) and host time (2-10 %), plus the optimizer's
                 CPU update and its node's optimizer I/O past it: the I/O (15-80 % of the compute at
                 the fast rates, :data:`NV_IO`, 2-8 % jitter per node and step; the write 40-60 % of
                 it) is pipelined with the CPU update (20-90 % of the I/O's time, :data:`NV_OPT`)
                 sub-group by sub-group, but for the last sub-group (5-25 % of the I/O,
                 :data:`NV_TAIL`), so the exposed share varies per job; plus checkpoints (every
                 200-1000 steps, 1-3 steps at 1.5-4x) and evaluations (every 100-1000 steps, +1-4
                 mean steps). The drive writes into an SLC cache at the fast rate and past it at the
                 native (TLC / QLC) rate, 2-6x slower (:data:`NV_NATIVE`); it folds the cache back
                 in its idle time, 0.4-1.3 of a step's write per ordinary step and proportionally
                 more in a checkpoint's or an evaluation's idle time (:data:`NV_FOLD`); under 1,
                 sustained writing fills the cache (10-150 steps from empty at the net rate,
                 :data:`NV_FILL`; each node's drive 10 % apart), and the steps then write their net
                 excess at the native rate: a plateau, with faster stretches after each idle gap (a
                 sawtooth).  The fill is a clipped running sum (:func:`_clip_scan`).  Each restart's
                 downtime folds the whole cache and cools the drive (a restart is read from the
                 warm-ups).  Garbage-collection pauses on a share of the steps (1/300-1/50, growing
                 by up to 2x over the series as the drive fills), each 0.5-3 native writes of the
                 step's volume.  The drive's temperature follows its write power (a first-order lag,
                 20-200 s, :data:`NV_TAU_S`; cooling in the idle time) and stays below the throttle
                 threshold (1.1-1.5 x the healthy steady temperature, :data:`NV_THRESHOLD`).
                 Healthy: all of that, the plateau included (the steady state a cache-bound job
                 always returns to after each start, restart and idle gap: the faster stretches are
                 healthy dips, never a rise), the series cut in 1-3 parts, a part after the first
                 starting with a planned restart with chance 0.6 (downtime 60-900 s, a warm-up,
                 another batch: the compute 0.97-1.04x; an empty cache).  Positives: 1-3 slowdowns
                 (one in each part, the first always, the others with chance 0.7; 200 steps after a
                 restart and before the next, else 40 healthy steps after), each raising the mean
                 busy time of one node's ranks (every rank waits for them at the all-reduce, but
                 only their records hold the slower optimizer) over its span by +12-45 %
                 (:data:`NODE_SLOWDOWN`, up to :data:`SPAN_OVERSHOOT` more) over their healthy mean:
                 a worn drive (``worn``: the job restarted onto a node whose drive's native rate is
                 ``1 / (1 + g)`` and whose GC pauses come ``1 + g`` times as often, at most 5x,
                 until a restart at the span's end moves it off; the cache still hides it until it
                 fills), another tenant's I/O or a RAID member's rebuild on the drive (``tenant``:
                 in episodes of 3-400 steps, log-uniform, :data:`NV_EPISODE`, on 20-90 % of them,
                 the drive shared with ``g`` times 0.5-2 of the job's I/O, at most 8) or a failed
                 cooling fan (``fan``: the drive's thermal resistance and time constant ``1 + g``
                 times, at most 9x: its temperature climbs towards ``1 + g`` times the healthy one
                 and past the threshold the drive throttles its I/O by their ratio, which holds it
                 there, until the fan is repaired at the span's end).  The pipelining and the cache
                 make the rise non-linear in ``g``: a kind that cannot reach its rise is drawn
                 again.  The counterfactual healthy series has the same restarts.  The size ``g`` is
                 solved by bisection for the rise over a span of 60-800 steps
                 (:data:`NODE_SLOW_ITERS`) and at least 1.3 x 25 x (cv / rise)^2, drawn again (at
                 most 8 times) until the labelled span holds 25 x (its own sd / its rise)^2 steps
                 and stands +12 % above the healthy steps of the 200 before it, and of the 200 after
                 it where no restart follows (their 4 longest left out; the first part's last try:
                 another tenant at the smallest rise over the part's whole room).  Labelled from the
                 first step that changes to the last, by the span's mean rise, with the node's ranks
                 (kinds ``worn`` / ``tenant`` / ``fan``).  Negatives: the healthy series alone.

The held-out family of the twenty-second round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``observe``      the job's own observability overhead: profilers, logging and metrics run inside
                 the training loop, and the usual setups enable them on rank 0 alone or on each
                 node's first rank (the observers, chance 0.5 each, :data:`OB_FIRST_P`), so
                 those ranks are busier and every other rank waits for them at the next
                 synchronisation.  A job is 1-16 ranks (:data:`NODE_RANKS`) on nodes of 1-8
                 (:data:`OB_NODE`); each rank's record is its busy time (the wait for the
                 observers is not in it): its compute (a wandering rate, AR(1) in log space,
                 jitter 0.3-2 %, a warm-up, 0.2-1 % per rank) and host time (2-10 %), plus
                 checkpoints (every 200-1000 steps, 1-3 steps at 1.5-4x) and evaluations (every
                 100-1000 steps, +1-4 mean steps); an observer adds its log lines, written
                 synchronously (0.2-2 % of a mean step, 10-50 % jitter, :data:`OB_LOG`), the
                 metric exports / log flushes (every 10-100 steps, 2-30 % of a mean step each,
                 :data:`OB_FLUSH`) and, on rank 0, a progress bar's refresh (1-5 ms at most
                 every 0.1 s).  Healthy: all of that, and in 60 % of the series a
                 ``torch.profiler`` schedule on the observers (:data:`OB_PROF_P`): a cycle of
                 50-500 steps (wait, 1-2 warmup steps at 10-40 % of an active step's overhead,
                 1-5 active steps whose compute and host are +20-300 %, :data:`OB_PROF_X`), the
                 trace exported on the step after the active ones (0.3-1 mean steps per active
                 step, :data:`OB_EXPORT`), the cycle made longer until its overhead is at most
                 5 % of it (:data:`OB_PROF_SHARE`: an expensive trace is taken rarely), the
                 schedule begun anew at each restart; the series cut in 1-3 parts, a part after
                 the first starting with a planned restart with chance 0.6 (downtime 60-900 s,
                 a warm-up, another batch: the busy time 0.97-1.04x).  Positives: 1-3 slowdowns
                 (one in each part, the first always, the others with chance 0.7; 200 steps
                 after a restart and before the next, else 40 healthy steps after), each raising
                 the mean busy time of the ranks it is on over its span by +12-45 %
                 (:data:`NODE_SLOWDOWN`, up to :data:`SPAN_OVERSHOOT` more) over their healthy
                 mean: a profiler left active on every step after a debugging session
                 (``profiler``: the observers' compute and host at least ``1 + g`` times, at most
                 +60 %, until a restart at the span's end), anomaly detection or synchronous
                 CUDA launches turned on by a debug flag at a restart (``anomaly``: every rank's
                 compute and host ``1 + g`` times, at most 3x, until the restart that turns it
                 off), a debug log level for the collectives (``nccl_debug``, NCCL_DEBUG=INFO
                 set at a restart until the next: every rank ``g`` mean steps a step, at most
                 0.3, times the step's collectives over their mean, an evaluation's 1.5-4x), a
                 synchronous log handler on a network filesystem that goes slow (``nfs_log``:
                 in runs of 2-120 s, log-uniform, :data:`OB_EPISODE_S`, on 20-90 % of them, the
                 observers' log lines and flushes ``1 + g`` times 0.5-2 longer, at most 1000:
                 a write of milliseconds stalled for seconds) or log lines that grow with the
                 run (``log_growth``: the observers' lines ``1 + g w`` times, ``w`` climbing
                 linearly over the span, until a restart at its end).  The counterfactual
                 healthy series has the same restarts (and the profiler's schedule begun anew
                 at them).  The size ``g`` is solved by bisection for the rise over a span of
                 60-800 steps (:data:`NODE_SLOW_ITERS`) and at least 1.3 x 25 x (cv / rise)^2
                 (cv: the observers' mean busy time's), drawn again (at most 8 times) until the
                 labelled span holds 25 x (its own sd / its rise)^2 steps and stands +12 % above
                 the healthy steps of the 200 before it, and of the 200 after it where no
                 restart follows (their 4 longest left out; the first part's last try: a
                 profiler left active at the smallest rise over the part's whole room).
                 Labelled from the first step that changes to the last, by the span's mean
                 rise, with the observers (every rank for ``anomaly`` / ``nccl_debug``; kinds
                 ``profiler`` / ``anomaly`` / ``nccl_debug`` / ``nfs_log`` / ``log_growth``).
                 Negatives: the healthy series alone.

The held-out family of the twenty-third round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``wan``          training across sites (regions, data centres) over a wide-area link: DiLoCo-style
                 local SGD, the ranks of each site synchronising every step over the site's own
                 fabric and the sites every H steps (an outer step) over the WAN, whose time is
                 latency plus bytes over a bandwidth that varies.  A job is 4-16 ranks
                 (:data:`WN_RANKS`) in 2-8 sites of 2-8 (:data:`WN_SITE`); each rank's record is
                 its busy time: its compute (a wandering rate, AR(1) in log space, jitter 0.3-2 %,
                 a warm-up, 0.2-1 % per rank) and host time (2-10 %), its site's all-reduce
                 (10-50 % of the compute, :data:`WN_INNER`, 2-8 % jitter per site and step)
                 hidden behind the backward up to 20-70 % of the compute but for its last
                 bucket (5-25 %), checkpoints (every 200-1000 steps, 1-3 steps at 1.5-4x) and
                 evaluations (every 100-1000 steps, +1-4 mean steps), and the outer sync, the
                 same on every rank: ``latency x 2 ceil(log2 sites)`` (one-way 5-80 ms,
                 :data:`WN_LATENCY_S`, a halving-doubling across the sites) plus the volume
                 (0.5-20 mean steps at the full bandwidth, :data:`WN_VOLUME`) over the available
                 bandwidth, or over the transfer's window where the round trip makes it
                 window-limited (the window 1.2-4x the bandwidth-delay product, :data:`WN_BDP`),
                 times a heavy-tailed jitter (log-normal 5-20 % times 1 + a Pareto tail of index
                 2.5-4 scaled 5-30 %).  H is 20-500 steps (:data:`WN_OUTER`), streamed in 2-16
                 fragments with chance 0.6 (Streaming DiLoCo: one fragment every H / P steps, at
                 least 5), then raised (up to 500) and the volume capped until a sync costs at
                 most 0.4 x sqrt(its steps) mean steps (:data:`WN_SPIKE`: an expensive sync is
                 taken rarely); the sync blocks the step it follows, or (chance 0.5) runs over
                 the next 1-20 steps (:data:`WN_WINDOW`), the site's all-reduce up to 1.2-2x
                 slower meanwhile, and shows only past the window's time (at least 5-25 % of
                 it).  Where the sites are close (the latency term under half a mean step),
                 chance 0.4 of hierarchical data parallelism instead (:data:`WN_HIER_P`): the
                 sites' all-reduce every step (0.1-0.6 mean steps) behind the backward.  The
                 outer schedule resumes from an outer step at each restart.  Healthy: all of
                 that (one long step every few to 500 steps, or a small share spread and
                 exposed), the WAN's available bandwidth a wave (a period of 1-24 h,
                 :data:`WN_WAVE_S`: the day, or hourly bulk transfers; in steps from the step
                 time in seconds, so a series sees part of a cycle or a dozen; dipping by
                 10-60 % at its busiest, halved until the mean busy time, over the whole rounds
                 of syncs nearest 400 steps, moves by less than 3 %, :data:`WN_WAVE_RISE`), the
                 series cut in 1-3 parts, a part after the first starting with a planned
                 restart with chance 0.6 (downtime 60-900 s, a warm-up, another batch: the busy
                 time 0.97-1.04x).  Positives: 1-3 slowdowns (one in each part, the first
                 always, the others with chance 0.7; 40 healthy steps after each), each raising
                 the mean busy time of the ranks it names over its span by +12-45 %
                 (:data:`NODE_SLOWDOWN`, up to :data:`SPAN_OVERSHOOT` more) over their healthy
                 mean: a route change to a longer path (``route``: the round trip ``1 + g``
                 times, at most 16x, until it flips back; a window-limited transfer slower by
                 its ratio), a congested peak hour (``peak``: the bandwidth ``1 / (1 + g h)``,
                 ``h`` a half-sine hump over the span, at most 16x at its top: past the
                 overlap, the exposed part grows), a degraded WAN circuit (``circuit``: the
                 bandwidth ``1 / (1 + g)``, at most 16x lower, for an episode), each on every
                 rank (every site waits at the sync; only the syncs whose window lies in the
                 span change), or a site whose local fabric degrades (``fabric``: its
                 all-reduce ``1 + g`` times slower, at most 16x, climbing linearly over 30-100 %
                 of the span; every step of its ranks).  Where syncs are rare a WAN slowdown
                 raises only a few long steps and is not decidable (drawn again: the WAN kinds
                 are labelled mostly under hierarchical data parallelism or frequent syncs).
                 The size ``g`` is solved by bisection for the rise over a span of 60-800 steps
                 (:data:`NODE_SLOW_ITERS`) and at least 1.3 x 25 x (cv / rise)^2 (cv: the
                 noisiest site's mean busy time), drawn again (at most 8 times) until the
                 labelled span holds 25 x (its own sd / its rise)^2 steps and stands +12 % above
                 the healthy steps of the 200 before it and of the 200 after it (their 4
                 longest left out; the first part's last try: a site's fabric at +20 %,
                 :data:`WN_LAST_RISE`, over the part's whole room).  Labelled from the first
                 step that changes to the last, by the span's mean rise, with every rank or the
                 site's ranks (kinds ``route`` / ``peak`` / ``circuit`` / ``fabric``).
                 Negatives: the healthy series alone.

The held-out family of the twenty-fourth round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``pcie``         the host-device PCIe path of each GPU: every step moves the rank's batch (the
                 data loader's pinned-memory host-to-device copy) and, where the job offloads,
                 activations or optimizer states over its GPU's own link, and the two GPUs
                 behind one PCIe switch (with its NIC) share the switch's upstream link to the
                 host.  A job is 1-16 ranks (:data:`NODE_RANKS`) on nodes of 1-8
                 (:data:`PC_NODE`), two GPUs of a node behind each switch (one where the node
                 has one); each rank's record is its busy time (the others wait for it at the
                 all-reduce; the wait is not in it): its compute (a wandering rate, AR(1) in
                 log space, jitter 0.3-2 %, a warm-up, 0.2-1 % per rank) under variable-length
                 batches (each rank's batch per step log-normal, 1-4 %, :data:`PC_BATCH`: its
                 compute and its transfers with it), host time (2-10 %), its transfers (the
                 copy, 3-20 % of the mean compute at the link's full rate, :data:`PC_H2D`, plus
                 offload with chance 0.4, 10-60 %, :data:`PC_OFFLOAD`) with correctable-error
                 (AER) replays (each transfer 1 + 0.3-3 % times a Lomax draw of index 1.5-3, at
                 most 2x, :data:`PC_AER`: a heavy-tailed small jitter) on the copy stream,
                 hidden behind 30-90 % of the compute but for their last 5-30 %
                 (:func:`_overlapped`), plus checkpoints (every 200-1000 steps, 1-3 steps at
                 1.5-4x) and evaluations (every 100-1000 steps, +1-4 mean steps).  While a
                 switch's two transfers overlap each gets half of its upstream (1-1.6 GPU
                 links, :data:`PC_UPSTREAM`: an overlapped unit costs ``2 / upstream - 1``
                 more); the second copy's phase after the first drifts by a whole step every
                 100-3000 steps (:data:`PC_BEAT`, each switch its own, either way, 2 % jitter),
                 so the contention (the overlap of two transfers on a circle,
                 :func:`_circular_overlap`) drifts in and out over hundreds of steps; it is
                 halved until no rank's mean busy time (moving means over 200 steps) moves by
                 3 % over the series (:data:`PC_BEAT_RISE`).  Healthy: all of that; a link
                 trained down to half its rate (x16 -> x8 or Gen5 -> Gen4) on one rank with
                 chance 0.5 (:data:`PC_HIDDEN_P`) from a step after the lead's first 200 until
                 the next restart (which retrains it at full width), kept where its rank's mean
                 busy time (moving means over 200 steps) rises by less than 6 %
                 (:data:`PC_HIDDEN_RISE`: its transfers hidden behind the compute; a real,
                 lasting change below the rule, never labelled, in positives too); the series
                 cut in 1-3 parts, a part after the first starting with a planned restart with
                 chance 0.6 (downtime 60-900 s, a warm-up, another batch: the busy time
                 0.97-1.04x).  Positives: 1-3 slowdowns (one in each part, the first always, the
                 others with chance 0.7; 200 steps after a restart and before the next, else 40
                 healthy steps after), each raising the mean busy time of the ranks it names
                 over its span by +12-45 % (:data:`NODE_SLOWDOWN`, up to :data:`SPAN_OVERSHOOT`
                 more) over their healthy mean: a link retrained lower after an error burst
                 (``downtrain``: one rank's transfers ``2 (1 + g)`` times, at most 8x, until the
                 restart at the span's end retrains it), a replay storm (``storm``: one rank's
                 transfers ``1 + g h`` times, ``h`` a half-sine hump over the span, times a
                 log-normal factor per step of sd 0.3-0.8, at most 61x at the top: a degrading
                 link's retries rise and it recovers) or a neighbour on a switch (``neighbour``:
                 another tenant's or the NIC's traffic on its upstream, in runs of 2-300 steps,
                 log-uniform, :data:`PC_EPISODE`, on 20-90 % of them, the switch's ranks'
                 transfers ``1 + g`` times 0.5-2 longer, at most 8).  Under a slowdown the
                 switch's contention is the healthy one's (a downtrained link asks less of the
                 upstream for longer).  The hidden share makes the rise non-linear in ``g``: a
                 downtrain whose half rate alone passes its rise, or a kind that cannot reach
                 it, is drawn again, and so is one where a named rank rises by less than half
                 the rise (a switch's two ranks, one already downtrained).  The counterfactual
                 healthy series has the same restarts.  The size ``g`` is solved by bisection
                 for the rise over a span of 60-800 steps (:data:`NODE_SLOW_ITERS`) and at least
                 1.3 x 25 x (cv / rise)^2 (cv: the noisiest rank's or switch's mean busy time),
                 drawn again (at most 8 times) until the labelled span holds 25 x (its own sd /
                 its rise)^2 steps and stands +12 % above the healthy steps of the 200 before it,
                 and of the 200 after it where no restart follows (their 4 longest left out; the
                 first part's last try: a replay storm at the smallest rise over the part's
                 whole room).  Labelled from the first step that changes to the last, by the
                 span's mean rise, with the rank or the switch's ranks (kinds ``downtrain`` /
                 ``storm`` / ``neighbour``).  Negatives: the healthy series alone.

The held-out family of the twenty-fifth round (written and committed before that round's
detector changes, by someone who never ran the detector on it):

``steal``        a cloud VM's steal time: the job's GPUs are passed through to VMs whose vCPUs
                 share their host's physical CPUs with other tenants' VMs, and where the host's
                 demand passes its CPUs the hypervisor shares them fairly, so a runnable vCPU runs
                 ``1 / rho`` of the time (``rho``: every VM's demand over the host's CPUs; the
                 steal ``1 - 1 / rho``, invisible to the guest but as steal time).  The GPUs do not
                 slow; the host's CPU work does.  A job is 1-16 ranks (:data:`NODE_RANKS`) on VMs
                 of 1-4 GPUs (:data:`ST_VM`), each VM on its own host of 8 GPUs
                 (:data:`ST_HOST_GPUS`); each rank's record is its busy time (the others wait for
                 it at the all-reduce; the wait is not in it): its compute (a wandering rate, AR(1)
                 in log space, jitter 0.3-2 %, a warm-up, 0.2-1 % per rank), its launch thread's
                 CPU time (5-30 % of the compute, :data:`ST_HOST`, 5-20 % jitter) behind the launch
                 queue's lead over the device (30-90 % of the compute, :data:`ST_HIDE`) but for its
                 last 5-30 % (:func:`_overlapped`), or its loader's CPU time per batch over its
                 workers where that is longer (0.3-0.75 of the mean step, :data:`ST_FEED`: hidden
                 while healthy), plus checkpoints (every 200-1000 steps, 1-3 steps at 1.5-4x) and
                 evaluations (every 100-1000 steps, +1-4 mean steps).  Each VM's host is asked for
                 its own demand (its share of the host's GPUs times its vCPUs' use, 30-80 %,
                 :data:`ST_UTIL`) plus its co-tenants' (the rest of a healthy demand of 0.6-1.1 of
                 the host's CPUs, :data:`ST_LOAD`), which wanders (AR(1) in log space, sd 0.05-0.2,
                 lag-1 correlation 0.99-0.999), changes as tenants come and go (a level held
                 100-3000 steps, :data:`ST_TENANCY`, log-normal, sd 0.3) and follows the day (a
                 period of 1-24 h, :data:`ST_WAVE_S`, +-10-50 % in log space).  Past 1 the loader's
                 workers (many, always runnable) take ``rho`` times their CPU time, and the launch
                 thread's CPU time ``h`` waits for the co-tenants' time slices (1-30 ms,
                 :data:`ST_QUANTUM_S`, in steps from the step time in seconds): ``q floor(phase + h
                 (rho - 1) / q)`` more, its mean ``h (rho - 1)``, whole slices now and then where
                 ``h`` is short, a level where it is long (each rank's phase against the slices its
                 own per step).  The provider's host maintenance (chance 0.5 a series,
                 :data:`ST_MAINT_P`: 1-2 live migrations of a VM): a pre-copy of 5-120 s
                 (:data:`ST_PRECOPY_S`, in steps) whose dirty-page logging makes the VM's CPU work
                 5-30 % slower (:data:`ST_DIRTY`), then the VM frozen 0.05-5 s
                 (:data:`ST_BLACKOUT_S`: one step that much longer on its ranks).  Healthy: all of
                 that (steal in a share of the steps, at its peak up to 70 % of the vCPUs' time,
                 mostly hidden), the co-tenants' variation and the pre-copies' overhead halved
                 until no rank's mean busy time (moving means over 200 steps, the blackouts left
                 out) moves by 5 % over the series (:data:`ST_RISE`: tenants that come and go are
                 real, lasting changes below the rule), the series cut in 1-3 parts, a part after
                 the first starting with a planned restart with chance 0.6 (downtime 60-900 s, a
                 warm-up, another batch: the busy time 0.97-1.04x).  Positives: 1-3 slowdowns (one
                 in each part, the first always, the others with chance 0.7; 200 steps after a
                 restart and before the next, else 40 healthy steps after), each raising the mean
                 busy time of one VM's ranks over its span by +12-45 % (:data:`NODE_SLOWDOWN`, up
                 to :data:`SPAN_OVERSHOOT` more) over their healthy mean: a co-tenant's CPU-heavy
                 work (``neighbour``: its demand ``g`` times 0.5-2 host CPUs' worth, in runs of
                 5-300 steps, log-uniform, :data:`ST_EPISODE`, on 30-100 % of them), tenants packed
                 onto the host one after another (``packing``: 2-5 of them, ``g / k`` each, evenly
                 over 30-100 % of the span, :data:`ST_PACK`, leaving together at its end) or a live
                 migration onto a busier host (``migrated``: the series' pre-copy, at most half the
                 span, and blackout, then the co-tenants' demand ``g`` more until a restart at the
                 span's end moves the job off it); ``g`` at most 4 (:data:`ST_DEMAND_MAX`: an
                 oversold host).  Below the host's CPUs nothing is stolen, and the launch queue
                 hides the launch thread's wait, so the rise is non-linear in ``g``.  The
                 counterfactual healthy series has the same restarts.  The size ``g`` is solved by
                 bisection for the rise over a span of 60-800 steps (:data:`NODE_SLOW_ITERS`) and
                 at least 1.3 x 25 x (cv / rise)^2 (cv: the noisiest VM's mean busy time), drawn
                 again (at most 8 times) until the labelled span holds 25 x (its own sd / its
                 rise)^2 steps, each of the VM's ranks rises by half the rise at least, and it
                 stands +12 % above the healthy steps of the 200 before it, and of the 200 after it
                 where no restart follows (their 4 longest left out; the first part's last try:
                 packing at the smallest rise over the part's whole room).  Labelled from the first
                 step that changes to the last, by the span's mean rise, with the VM's ranks (kinds
                 ``neighbour`` / ``packing`` / ``migrated``).  Negatives: the healthy series alone.

:data:`HELD_OUT` names the families that were never looked at while the detector was changed
for issue 29 (decided before the changes): they are only evaluated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from scipy.signal import lfilter
from scipy.special import ndtr, ndtri

from stragglers.logs.records import CallRecord, IterationRecord

__all__ = [
    "EVENT_LOSS",
    "CallJob",
    "FAMILIES",
    "HELD_OUT",
    "SCENARIOS",
    "JobEvent",
    "JobSeries",
    "generate_call_job",
    "generate_job_corpus",
    "generate_series",
    "scenario_counts",
]

# -- constants of the corpus (all documented choices) -------------------------------------------
EVENT_LOSS = 0.10  # a slow period below this throughput loss is "minor"
MIN_EVENT_ITERS = 20  # labelled slow periods last at least this many iterations
BASE_S = (0.1, 10.0)  # healthy iteration time, log-uniform (seconds)
NOISE_DF = (3, 8)  # Student-t degrees of freedom (integers, inclusive)
NOISE_SCALE = (0.005, 0.04)  # noise scale in log space (0.5-4 %)
NOISE_PHI = (0.0, 0.6)  # AR(1) coefficient
SPIKE_RATE = (1 / 400, 1 / 80)  # probability of a spike per iteration
SPIKE_FACTOR = (1.3, 3.0)  # spike height (log-uniform)
FIRST_ITER_FACTOR = (3.0, 8.0)  # first iteration of a start or restart
HUMP_AMPLITUDE = (0.05, 0.40)  # re-warm-up hump (relative), decays to 0 ...
HUMP_ITERS = (20, 200)  # ... over this many iterations
LEAD_ITERS = 300  # no labelled event starts earlier in a series (warm-up)
SLOW_LOSS = (0.12, 0.60)  # loss of a step slowdown (restart, ckpt, staircase, regime, sampled)
SLOW_ITERS = (MIN_EVENT_ITERS, 1000)  # its duration, log-uniform
CKPT_INTERVAL = (50, 100, 200, 500)  # checkpoint interval of the restart family
RESTARTS = (1, 3)  # restarts per restart series
RESTART_DOWNTIME_S = (60.0, 900.0)  # seconds between the last iteration and the restart's first
REPARTITION = (0.05, 0.30)  # a re-partitioned restart is this much faster or slower
REPARTITION_P = 0.3  # chance of a re-partition per restart outside the repartition scenario
STALL_EVERY = (50, 1000)  # checkpoint / evaluation stall period
STALL_ITERS = (3, 6)  # stall length
STALL_FACTOR = (1.3, 3.0)  # stall height
FLAP_LOSS = (0.15, 0.50)
FLAP_PHASE = (10, 60)  # iterations slow, then fast (each drawn per phase)
FLAP_WINDOW = (200, 1500)
ISOLATED_STALLS = (3, 10)  # flapping negatives: isolated stalls of 1-5 iterations at 1.3-3x
STAIR_STEPS = (3, 8)
STAIR_STEP = (0.015, 0.03)
STAIR_TOTAL = (0.10, 0.15)
STAIR_SPAN = (1000, 8000)
REGIME_LOW = (0.005, 0.015)  # noise scale of the quiet regime
REGIME_HIGH = (0.04, 0.06)  # noise scale of the noisy regime
SAMPLE_STRIDES = (5, 10, 100)
SAMPLED_RECORDS = (400, 900)  # records of a sampled series
SAMPLED_EVENT_RECORDS = 3  # a sampled slow period covers at least this many records
RANKS = (2, 4)  # ranks of a multirank series
GREY_PERIODS = (1, 4)
GREY_LOSS = (0.10, 0.90)
GREY_ITERS = (MIN_EVENT_ITERS, 3000)
GREY_OVERLAP_P = 0.3  # chance that an injection starts inside the previous one
GREY_MINOR_P = 0.15  # chance that an injection is sub-threshold ...
GREY_MINOR_LOSS = (0.03, 0.09)  # ... with this loss (a "minor" event)
MISSING_RUNS = (0, 4)  # runs of dropped records per series (families with MISSING_FAMILIES)
MISSING_LEN = (1, 50)  # records in a dropped run (log-uniform)
MISSING_FAMILIES = frozenset({"restart", "ckpt_stall", "noise_regime", "multirank", "greyhound"})
FIELD_CHOICES = ("both", "duration", "ts")  # which of ts / duration the records carry
TS_ONLY_P = 0.25  # share of series with ts only (families where it is allowed)
SERIES_ITERS = (2000, 4500)  # executed iterations of a series (where not set otherwise)

# issue 29 families (module docstring)
FS_SLOWDOWN = (0.10, 0.50)  # fail-slow episode: iteration time increase (relative)
FS_ITERS = (20, 150)  # its duration (log-uniform)
FS_EPISODES = (1, 3)
FS_COMP_FRACTION = (0.5, 0.9)  # share of the iteration that is compute
FS_COMM_JITTER = (0.2, 0.5)  # per-iteration spread of a congestion episode (log space)
FS_COMP_JITTER = (0.0, 0.1)  # ... of a compute episode
FS_MINOR = (0.03, 0.08)
RAMP_ITERS = (20, 200)
RAMP_SLOWDOWN = (0.15, 0.30)
RAMP_HOLD = (150, 1500)
DRIFT_TOTAL = (0.05, 0.15)  # a scheduled drift (ramp negatives) ...
DRIFT_ITERS = (800, 4000)  # ... over this many iterations
SHORT_SLOWDOWN = (0.5, 2.0)
SHORT_ITERS = (10, 20)
SHORT_EPISODES = (1, 4)
SHORT_STALL_EVERY = (100, 500)
SHORT_STALL_ITERS = (1, 6)
HUMP_RISE = (5, 10)
HUMP_SLOWDOWN = (0.12, 0.35)
HUMP_HOLD = (10, 25)
HUMP_DECAY = (5, 15)
HUMP_MINOR = (0.03, 0.07)
WARM_ONSET_AT = (8, 40)  # job iteration where a warm-up slowdown starts
WARM_SLOWDOWN = (0.15, 0.60)
WARM_SLOW_ITERS = (60, 1000)
RECONFIG_LEVEL = (0.05, 0.30)
# ckpt_burst (module docstring)
CB_COMP_FRACTION = (0.5, 0.85)  # share of the healthy iteration that is compute
CB_COMP_SIGMA = (0.005, 0.02)  # compute contention: AR(1) in log space, this stationary sd ...
CB_COMP_PHI = (0.5, 0.9)  # ... and this lag-1 correlation
CB_PARETO_ALPHA = (2.5, 4.0)  # communication jitter: Pareto tail index ...
CB_PARETO_SCALE = (0.02, 0.08)  # ... times this (relative to the communication time)
CB_BURST_P = (1 / 150, 1 / 40)  # chance per iteration that a communication burst begins
CB_BURST_ITERS = (1, 4)
CB_BURST_FACTOR = (2.0, 5.0)  # communication time in a burst
CB_CKPT_EVERY = (100, 400)
CB_CKPT_ITERS = (1, 3)
CB_CKPT_FACTOR = (1.5, 4.0)  # the whole iteration during a checkpoint save
CB_SHIFT = (0.12, 0.45)  # iteration time increase of a level shift
CB_SHIFT_ITERS = (30, 600)  # its duration (log-uniform)
CB_MINOR = (0.03, 0.07)
# the warm-up of a job's start and of every restart (1 + A exp(-t / tau), the first step
# slower), as bimodal_replay, ladder, seqlen, accum, pipeline and the families of ranks on
# nodes draw it (contention: its first step alike)
NODE_WARM_AMPLITUDE = (0.05, 0.4)
NODE_WARM_TAU = (3.0, 30.0)
NODE_FIRST = (2.0, 10.0)
# contention (module docstring)
CT_SIGMA = (0.004, 0.035)  # log-normal noise scale: its wandering range
CT_SIGMA_STEP = 0.03  # per-iteration step of log(scale) before smoothing
CT_PARETO_ALPHA = (2.0, 3.5)  # tail index of the Pareto factor ...
CT_PARETO_SCALE = (0.003, 0.015)  # ... times this
CT_WARM_AMPLITUDE = (0.1, 0.6)  # warm-up: 1 + A exp(-t / tau)
CT_WARM_TAU = (5.0, 50.0)
CT_FIRST = NODE_FIRST  # the first iteration
CT_EPISODE_RATE = (1 / 400, 1 / 80)  # contention episodes per iteration
CT_EPISODE_RISE = (0.05, 0.40)  # their mean rise
CT_EPISODE_JITTER = (0.1, 0.5)  # per-iteration spread (log space)
CT_STALL_MAX = 8  # an episode this short is a stall (the stall of docs/detection.md)
CT_LONG_P = 0.3  # slow scenario: chance that an episode may last 20-60 iterations
CT_SLOWDOWN = (0.10, 0.50)
CT_SLOW_ITERS = (MIN_EVENT_ITERS, 600)
CT_RAMP_RISE = (5, 60)
CT_HUMP_RISE = (3, 15)
CT_HUMP_DECAY = (3, 20)
# megatron (module docstring): an iteration is the sum of its components
MG_COMP_SHARE = (0.55, 0.85)  # forward / backward compute: share of the mean iteration
MG_COMP_SIGMA = (0.003, 0.015)  # its rate wanders slowly: AR(1) in log space, stationary sd
MG_COMP_PHI = (0.97, 0.995)  # ... and lag-1 correlation
MG_COMP_JITTER = (0.002, 0.01)  # ... plus independent per-iteration jitter (log space)
MG_AR_SHARE = (0.10, 0.35)  # all-reduce: share of the mean iteration (the rest is fixed work)
MG_AR_SLOW_P = (0.05, 0.35)  # chance that an iteration's all-reduce takes the slow path
MG_AR_SLOW_X = (1.3, 2.5)  # slow path over fast path
MG_AR_STAY = (0.0, 0.7)  # chance the path of the previous iteration is kept (runs of a path)
MG_AR_JITTER = (0.01, 0.08)  # per-iteration spread of each path (log space)
MG_DL_EVERY = (30, 400)  # data-loader stalls: geometric inter-arrival, this mean
MG_DL_STALL = (0.2, 3.0)  # a stall adds this many mean iterations (log-uniform)
MG_DL_ITERS = (1, 2)  # a stall lasts one or two iterations
MG_WARM_AMPLITUDE = (0.05, 0.5)  # compute warm-up 1 + A exp(-t / tau) (kernel autotuning)
MG_WARM_TAU = (3.0, 40.0)
MG_FIRST = (3.0, 20.0)  # the first iteration (graph capture, allocator)
MG_SLOWDOWN = (0.10, 0.50)  # iteration-time increase of a slowdown (of its mean)
MG_SLOW_ITERS = (MIN_EVENT_ITERS, 600)
MG_RAMP_RISE = (5, 80)
MG_HUMP_RISE = (3, 20)
MG_HUMP_DECAY = (3, 25)
# bimodal_replay (module docstring)
BM_MODES = (2, 3)  # healthy modes (inclusive)
BM_GAP = (0.12, 0.35)  # a slower mode over the fast one (relative)
BM_DWELL = (1, 60)  # bounds of a mode's dwell bounds (iterations)
BM_DWELL_SPAN = (5, 40)  # ... a mode's dwell drawn log-uniform in [lo, lo x this ratio]
BM_JITTER = (0.004, 0.025)  # log-space Student-t jitter scale ...
BM_JITTER_DF = (2.5, 5.0)  # ... and degrees of freedom
BM_WARM_AMPLITUDE = NODE_WARM_AMPLITUDE
BM_WARM_TAU = NODE_WARM_TAU
BM_FIRST = NODE_FIRST
BM_SLOWDOWN = (0.10, 0.50)
BM_SLOW_ITERS = (MIN_EVENT_ITERS, 600)
BM_STUCK_ITERS = (80, 600)  # a mode stuck: far longer than any dwell
BM_STUCK_P = 0.35  # chance that a slowdown is the highest mode stuck
BM_RAMP_RISE = (5, 60)
BM_HUMP_RISE = (3, 15)
BM_HUMP_DECAY = (3, 20)
# ladder (module docstring)
LD_WANDER_SD = (0.008, 0.02)  # healthy level: AR(1) in log space, this stationary sd ...
LD_WANDER_PHI = (0.99, 0.998)  # ... and lag-1 correlation, ...
LD_WANDER_BOUND = 0.035  # ... squashed into +-this (tanh)
LD_SIGMA = (0.004, 0.02)  # jitter: Gaussian in log space, mean 1, this scale ...
LD_SIGMA_PHI = (0.0, 0.4)  # ... and lag-1 correlation
LD_VOL_BURSTS = (1, 5)  # volatility bursts per series: the scale x LD_VOL_X, the mean kept
LD_VOL_ITERS = (40, 400)  # their length (log-uniform)
LD_VOL_X = (3.0, 6.0)
LD_VOL_EDGE = 10  # iterations over which a burst's scale rises and falls
LD_SIGMA_MAX = 0.08  # the jitter scale never exceeds this
LD_CONGEST_JITTER = 6.0  # congested communication is jittery: scale x (1 + this x rise)
LD_EVAL_EVERY = (50, 100, 200, 250, 500)  # an evaluation / logging iteration every N ...
LD_EVAL_X = (1.5, 5.0)  # ... this many times longer (log-uniform, each)
LD_WARM_AMPLITUDE = NODE_WARM_AMPLITUDE
LD_WARM_TAU = NODE_WARM_TAU
LD_FIRST = NODE_FIRST
LD_RUNG = (0.03, 0.08)  # a rung of the ladder: iteration time +3-8 % (each below the rule)
LD_RUNGS = (3, 6)  # rungs of a congestion ladder (inclusive) ...
LD_TOTAL = (0.18, 0.45)  # ... adding up to this (positives)
LD_RUNG_ITERS = (15, 100)  # each rung held this long (log-uniform)
LD_TOP_ITERS = (30, 500)  # the top held this long (log-uniform; longer where needed, below)
LD_MEAN_MIN = 0.12  # a ladder's mean rise over its whole span (from the first rung) >= this
LD_DOWN_ITERS = (10, 80)  # a stepwise release: each rung down held this long
LD_ABRUPT_P = 0.5  # chance that the congestion clears at once
LD_SMALL_RUNGS = (1, 2)  # a light competing flow (never an event): rungs ...
LD_SMALL_TOTAL = (0.02, 0.05)  # ... adding up to this
LD_SMALL_P = 0.5  # chance per part of the series without a ladder
LD_PART = 700  # the series is cut in parts of at least this many iterations
# the labels of the families whose slowdowns are drawn for a decidable rise (``seqlen`` onwards;
# each family's own ranges stay under its prefix): one rule, shared
SPAN_DECIDABLE = 25.0  # a labelled span at least this x (cv / rise)^2 long (the rise 5 standard
#                        errors of the span's mean; cv the healthy one, or the span's own sd)
SPAN_NEED_MARGIN = 1.3  # a span drawn this much longer than that needs (its spread is estimated)
SPAN_TRIES = 8  # a planned slowdown is drawn again until decidable, at most this many times
SPAN_MORE_P = 0.7  # a positive: a slowdown in its first part, in each other with this chance
SPAN_OVERSHOOT = 0.10  # a span's rise at most this above the drawn one (it is solved coarsely;
#                        stalls, pauses, losses, blocked buckets and recompiles come whole)
SPAN_SOLVE_STEPS = 18  # bisection steps for a slowdown's size
SPAN_SETTLE = 200  # slowdowns start this long after a restart or a batch-shape change ...
SPAN_CLEAR = 200  # ... and end this long before the next one (else 40 steps)
# The job schedule and compute every family of ranks on nodes shares (``power``, ``numa``,
# ``rollout``, ``fabric``), and the families before them that drew the same ranges (``memory``,
# ``prefetch``, ``lossy_link``, ``gc_pause``, ``dispatch``, ``moe``, ``hw_queue``, ``compile``:
# each the subset it uses, where its steps are iterations):
NODE_CKPT_EVERY = (200, 1000)  # a checkpoint every this many steps ...
NODE_CKPT_ITERS = (1, 3)  # ... that many steps ...
NODE_CKPT_X = (1.5, 4.0)  # ... this many times longer
NODE_EVAL_EVERY = (100, 200, 250, 500, 1000)  # an evaluation every this many steps ...
NODE_EVAL_X = (1.0, 4.0)  # ... adding this many mean steps
NODE_RESTART_P = 0.6  # a part after the first starts with a planned restart with this chance
NODE_DOWNTIME = (60.0, 900.0)  # a restart's downtime (seconds; the timestamps jump)
NODE_SLOWDOWN = (0.12, 0.45)  # mean rise of a slowdown's span over its healthy mean
NODE_SLOW_ITERS = (60, 800)  # its duration (log-uniform; >= SPAN_DECIDABLE x (cv / rise)^2)
NODE_RANKS = (1, 2, 4, 8, 16)  # ranks of the job (a step waits for the slowest node / worker)
NODE_WANDER_SD = (0.003, 0.015)  # device rate: AR(1) in log space, stationary sd ...
NODE_WANDER_PHI = (0.95, 0.995)  # ... and lag-1 correlation
NODE_JITTER = (0.003, 0.02)  # ... plus per-step jitter (log space)
NODE_RANK_JITTER = (0.002, 0.01)  # each rank's compute per step (log space)
#: the compute's ranges as :func:`_ranked_job` takes them, and a restart's warm-up
NODE_COMPUTE = (NODE_WANDER_SD, NODE_WANDER_PHI, NODE_JITTER, NODE_WARM_AMPLITUDE,
                NODE_WARM_TAU, NODE_FIRST)
NODE_WARM = (NODE_FIRST, NODE_WARM_AMPLITUDE, NODE_WARM_TAU)
# seqlen (module docstring): variable-length long-context batches, synchronous data parallelism
SL_RANKS = (2, 4, 8, 16)  # data-parallel ranks; the step waits for the slowest
SL_MICRO = (1, 6)  # micro-batches per rank and step (log-uniform integer)
SL_MEDIAN = (1 / 32, 1 / 4)  # median sequence length over the maximum (log-uniform) ...
SL_SIGMA = (1.0, 2.0)  # ... and the log-normal spread of the lengths (clipped at the maximum)
SL_ATTN = (0.5, 4.0)  # attention cost of one full-length sequence over the linear cost
SL_KERNEL_JITTER = (0.003, 0.015)  # per rank and step (log space)
SL_COMM_SHARE = (0.05, 0.25)  # exposed gradient all-reduce: share of the mean compute ...
SL_COMM_JITTER = (0.02, 0.10)  # ... its per-step spread (log space)
SL_FIXED_SHARE = (0.02, 0.10)  # optimizer step, logging: fixed work
SL_GC_EVERY = (100, 1000)  # unsynchronised GC: mean steps between two pauses of one rank ...
SL_GC_PAUSE = (0.1, 0.6)  # ... each this many mean compute times (log-uniform)
SL_WARM_AMPLITUDE = NODE_WARM_AMPLITUDE
SL_WARM_TAU = NODE_WARM_TAU
SL_FIRST = NODE_FIRST
SL_SLOWDOWN = NODE_SLOWDOWN  # mean rise of a slowdown over the healthy mean step time
SL_SLOW_ITERS = (40, 800)  # its duration (log-uniform; at least SPAN_DECIDABLE x (cv / rise)^2)
SL_WORKER_P = 0.6  # chance that a slowdown is one slow rank (else the all-reduce)
SL_WORKER_MAX = 20.0  # a slow rank's compute is at most this many times slower
# accum (module docstring): gradient accumulation, one record per micro-batch
AC_STEPS = (2, 3, 4, 6, 8, 12, 16)  # micro-batches per optimizer step (accumulation steps)
AC_WANDER_SD = NODE_WANDER_SD  # micro-batch compute: AR(1) in log space, stationary sd ...
AC_WANDER_PHI = NODE_WANDER_PHI  # ... and lag-1 correlation
AC_JITTER = NODE_JITTER  # ... plus per-micro-batch jitter (log space)
AC_COMM = (0.2, 2.0)  # exposed gradient all-reduce at the boundary, over a micro-batch
AC_COMM_JITTER = (0.03, 0.15)  # its spread from boundary to boundary (log space)
AC_BURST_RATE = (1 / 400, 1 / 80)  # transient congestion: chance per micro-batch ...
AC_BURST_P_MAX = 0.25  # ... of a boundary (k x the rate, at most this) ...
AC_BURST_X = (1.5, 4.0)  # ... of an all-reduce this many times slower (one boundary)
AC_OPT = (0.05, 0.3)  # optimizer step on the GPU, over a micro-batch ...
AC_OFFLOAD_OPT = (0.5, 3.0)  # ... or offloaded to the host (ZeRO-Offload style, CPU Adam)
AC_OFFLOAD_P = 0.4  # chance that a series offloads its optimizer
AC_OPT_JITTER = (0.01, 0.05)  # the optimizer step's spread (log space)
AC_EPOCH = (300, 2000)  # iterations (micro-batches) per epoch: at each epoch's start ...
AC_EPOCH_STALL = (2.0, 15.0)  # ... the data-loader workers restart (micro-batch times) and
#                               the accumulation restarts (a short last step flushes the rest)
AC_EVAL_EVERY = (50, 100, 200, 500)  # a validation pass every this many optimizer steps ...
AC_EVAL_X = (2.0, 8.0)  # ... adding this many micro-batch times to the boundary iteration
AC_WARM_AMPLITUDE = NODE_WARM_AMPLITUDE
AC_WARM_TAU = NODE_WARM_TAU
AC_FIRST = NODE_FIRST
AC_SLOWDOWN = NODE_SLOWDOWN  # mean rise of a slowdown over the healthy mean time
AC_SLOW_ITERS = SL_SLOW_ITERS  # its duration (log-uniform), whole accumulation cycles ...
AC_MIN_CYCLES = 6  # ... at least this many (so at least 6 slow boundaries), and at least
#                    SPAN_DECIDABLE x (healthy cv of a cycle's time / rise)^2
AC_COMM_P = 0.5  # kind of a slowdown: the all-reduce (congestion) with this chance, ...
AC_OFFLOAD_SLOW_P = 0.3  # ... the offloaded optimizer (CPU contention) with this one, else compute
AC_COMM_HIT = (0.7, 1.0)  # congestion: the share of the span's boundaries it slows ...
AC_COMM_SLOW_JITTER = (0.2, 0.5)  # ... each by a factor that varies this much (log space)
AC_COMM_MAX = 10.0  # a congested all-reduce is at most this many times slower
AC_OFFLOAD_MAX = 8.0  # a contended host optimizer step is at most this many times slower ...
AC_LAUNCH = (0.0, 0.03)  # ... and the micro-batches this much slower (CPU-bound launches)
# memory (module docstring): memory pressure, the CUDA caching allocator and Python's GC
MP_TOOTH = (50, 600)  # allocator: iterations until the cache is full (log-uniform) ...
MP_TOOTH_SPREAD = 0.3  # ... each tooth this much shorter or longer (uniform, relative)
MP_FRAG_AMP = (0.01, 0.05)  # ... the compute slower by up to this as fragmentation grows ...
MP_FLUSH = (0.3, 2.0)  # ... then the cache is freed and refilled: this many iteration times
MP_GC_PAUSE = (0.1, 1.0)  # a full GC pause, in iteration times (log-uniform) ...
MP_GC_JITTER = 0.3  # ... its spread (log space)
MP_GC_RATE = (1 / 1000, 1 / 150)  # automatic GC: chance per rank and iteration
MP_PLANNED_P = 0.4  # chance that a series runs planned GC (every rank at once) ...
MP_PLANNED_EVERY = (100, 200, 500, 1000)  # ... every this many iterations
MP_MASKED = (0.5, 3.0)  # planned GC: a slow healthy heap growth over the series (x1.5-4)
MP_FRAG_P = 0.5  # kind of a slowdown: allocator thrash with this chance (always under
#                  planned GC), else a host memory leak under automatic GC
MP_THRASH = (2.0, 8.0)  # thrash: the teeth this many times shorter (at least MP_MIN_TOOTH) ...
MP_MIN_TOOTH = 5
MP_MIN_TEETH = 3  # ... and at least this many teeth in the span
MP_LEAK_STEP = (0.1, 1.0)  # leak: every iteration this much slower per unit of heap growth
# prefetch (module docstring): input-pipeline stalls behind a prefetch queue
DL_RHO = (0.55, 0.85)  # the loader's utilisation: mean production time over mean compute
DL_READ_SIGMA = (0.05, 0.3)  # production time per batch: log-normal spread (mean kept)
DL_DEPTH = (2, 4, 8, 16)  # prefetch queue depth in batches (prefetch_factor x workers)
DL_HICCUP_RATE = (1 / 1000, 1 / 150)  # a storage hiccup starts with this chance per batch ...
DL_HICCUP_X = (3.0, 20.0)  # ... the batches' production this many times slower ...
DL_HICCUP_LEN = (1, 3)  # ... for this many batches
DL_EPOCH = (300, 3000)  # steps per epoch (log-uniform) ...
DL_PERSISTENT_P = 0.5  # ... the workers persist with this chance, else restart at each epoch
DL_STARTUP = (1.0, 10.0)  # ... a restart (and the job's start) waits this many mean steps
DL_HIDDEN_P = 0.5  # a hidden storage slowdown (never an event) in a part with this chance ...
DL_HIDDEN_ITERS = (100, 1000)  # ... this long (log-uniform) ...
DL_HIDDEN_MAX = 0.9  # ... the loader's utilisation at most this: the queue hides it
DL_TAIL = 60  # the queue refills within this many steps after a slowdown (else none)
DL_STORAGE_P = 0.6  # kind: every read slower (storage) with this chance, else a hiccup storm
DL_STORAGE_MAX = 2.5  # storage: the production time at most this many mean compute times
DL_STORM_X = (2.0, 8.0)  # storm: its hiccups this many times slower ...
DL_STORM_MAX = 0.5  # ... starting with chance up to this per batch; its span is drawn at
DL_STORM_WIDE = 4.0  # least this x SPAN_DECIDABLE x (healthy cv / rise)^2 long
# pipeline (module docstring): pipeline-parallel training, a GPipe schedule per iteration
PP_STAGES = (2, 4, 8)  # pipeline stages
PP_MICRO = (4, 6, 8, 12, 16, 24, 32)  # micro-batches per iteration (at least the stages) ...
PP_MICRO_START = 3  # ... at the start at most this many times the stages (a large bubble)
PP_IMBALANCE = (0.0, 0.25)  # a stage's compute 1 + this x u (u uniform; first and last >= 0.5)
PP_BACKWARD = (1.8, 2.2)  # backward over forward
PP_WANDER_SD = (0.003, 0.012)  # each stage's rate: AR(1) in log space, stationary sd ...
PP_WANDER_PHI = NODE_WANDER_PHI  # ... and lag-1 correlation
PP_JITTER = (0.005, 0.03)  # per stage, micro-batch and pass (log space)
PP_OVERHEAD = (0.02, 0.15)  # fixed per-micro-batch work (launches), share of one at the first m
PP_P2P = (0.02, 0.3)  # activation / gradient transfer between stages, over a forward
PP_P2P_JITTER = (0.05, 0.2)  # its spread (log space)
PP_HICCUP_RATE = (1 / 400, 1 / 80)  # a transfer hiccup: chance per iteration ...
PP_HICCUP_X = (3.0, 20.0)  # ... one transfer this many times slower
PP_AR = (0.02, 0.2)  # exposed data-parallel all-reduce per stage, over the mean iteration ...
PP_AR_JITTER = (0.03, 0.15)  # ... its spread (log space)
PP_WARM_AMPLITUDE = NODE_WARM_AMPLITUDE
PP_WARM_TAU = NODE_WARM_TAU
PP_FIRST = NODE_FIRST
PP_CHANGE_P = 0.6  # a micro-batch schedule change (online, the global batch kept) ...
PP_CHANGE_RATIO = (0.7, 1.03)  # ... to an m whose level over the old one lies here
PP_CHANGE_FASTER = 0.97  # ... one this much faster or more where there is one, ...
PP_CHANGE_FASTER_P = 0.75  # ... with this chance
PP_HIDDEN_P = 0.5  # a hidden slowdown of a stage with slack, in a part with this chance ...
PP_HIDDEN_ITERS = (100, 1000)  # ... this long (log-uniform) ...
PP_HIDDEN_SLACK = (0.5, 0.95)  # ... using this share of its slack to the slowest stage ...
PP_HIDDEN_RISE = 0.04  # ... kept only where the mean iteration rises by less than this
PP_SLOWDOWN = NODE_SLOWDOWN  # mean rise of a slowdown over the span's healthy mean
PP_SLOW_ITERS = NODE_SLOW_ITERS  # its duration (log-uniform; >= SPAN_DECIDABLE x (cv / rise)^2)
PP_STAGE_P = 0.6  # kind: one stage slower (else one link between two stages)
PP_STAGE_MAX = 8.0  # a slow stage at most this many times slower ...
PP_LINK_MAX = 60.0  # ... a congested link's transfers this many (mean) ...
PP_LINK_JITTER = (0.2, 0.5)  # ... varying this much from transfer to transfer (log space)
PP_SETTLE = 150  # slowdowns start this long after a part's start (a schedule change; they end
#                   SPAN_CLEAR before the next part's start)
# lossy_link (module docstring): packet loss and interface flapping on the training fabric
LL_COMM = (0.10, 0.40)  # exposed collectives: their share of the healthy iteration ...
LL_COMM_JITTER = (0.02, 0.10)  # ... and their spread (log space)
LL_HEALTHY_LOSS = (0.003, 0.02)  # a healthy fabric: the mean time lost to retransmissions
LL_RATE_SD = 0.6  # its loss chance wanders: AR(1) of the log chance, this stationary sd ...
LL_RATE_PHI = (0.99, 0.999)  # ... and lag-1 correlation, ...
LL_RATE_BOUND = 1.0  # ... squashed into +-this (tanh): x0.37-2.7
LL_FAST = (1.0, 6.0)  # a loss recovered by go-back-N: the collectives this much longer (extra)
LL_TAIL_P = (0.05, 0.30)  # chance that a loss is a tail loss, recovered after a timeout ...
LL_RTO = (1.0, 4.0)  # ... of this many mean iterations (log-uniform, per series) ...
LL_BACKOFF_P = 0.25  # ... doubled at each further retry, one more with this chance, ...
LL_RETRIES = 3  # ... at most this many retries (a stall of up to 7 timeouts)
LL_BLIP_RATE = (1 / 2000, 1 / 500)  # a healthy blip (a port reset elsewhere, rerouting) ...
LL_BLIP_ITERS = (3, 8)  # ... this long ...
LL_BLIP_P = (0.2, 0.5)  # ... a loss with this chance per iteration
LL_FLAP_P = 0.3  # kind: interface flapping with this chance, ...
LL_DOWNSHIFT_P = 0.25  # ... a lossy link trained down to a lower rate with this one, else lossy
LL_FLAP_DOWN = (2.0, 12.0)  # flapping: each flap this many mean iterations (log-uniform)
LL_SHIFT = (0.1, 0.3)  # downshift: the collectives this much slower on every iteration ...
LL_SHIFT_MAX = 1 / 3  # ... at most this share of the rise (the losses make the rest)
LL_RAMP_P = 0.5  # the loss chance climbs (a degrading cable) with this chance, else a step ...
LL_RAMP = (0.2, 0.6)  # ... linearly from the healthy chance over this share of the span, ...
LL_RAMP_MAX = 200  # ... at most this many iterations
LL_RATE_MAX = 0.35  # a degraded link's loss chance per iteration at most this (most healthy)
LL_FLAP_MAX = 0.25  # a flapping interface's chance of a flap per iteration at most this
# gc_pause (module docstring): host-side time, Python's garbage collector in the training loop
GC_HOST = (0.55, 0.9)  # host (Python) time of a step over its device time: the host runs ahead
GC_HOST_JITTER = (0.01, 0.05)  # ... its spread (log space)
GC_COMM = (0.05, 0.25)  # exposed gradient all-reduce over the mean step ...
GC_COMM_JITTER = (0.02, 0.10)  # ... its spread (log space)
GC_PAUSE = (0.3, 2.0)  # a full (gen-2) collection of the base heap: this many mean steps ...
GC_PAUSE_JITTER = 0.25  # ... its spread (log space)
GC_RANK_HEAP = 0.15  # each rank's heap about the series' one (log space)
GC_EPOCH = (300, 3000)  # the heap grows over an epoch (cached samples, metadata) ...
GC_EPOCH_GROWTH = (0.0, 0.6)  # ... by this share, and is released at its end
GC_EVERY = (30, 400)  # automatic GC: mean steps between two full collections of a rank ...
GC_ALLOC_SIGMA = (0.3, 1.2)  # ... its survivors per step: log-normal with this spread ...
GC_HEALTHY_SHARE = 0.08  # ... the mean interval raised until ranks x pause / it <= this
GC_MANUAL_P = 0.4  # planned GC (gc.disable, gc.collect on every rank at once) ...
GC_MANUAL_EVERY = (50, 100, 200, 250, 500)  # ... every this many steps, where a full
GC_MANUAL_PAUSE = (1.0, 3.0)  # collection of the base heap is long (this many mean steps)
GC_YOUNG = (0.005, 0.03)  # young (gen-0/1) collections: host time per step at the default
#                           thresholds (a share of the mean step)
GC_EVAL_ALLOC = (0.2, 1.0)  # an evaluation leaves survivors worth this share of a collection's
#                             threshold
GC_RATE_MAX = 100.0  # thresholds lowered: collections at most this many times more often ...
#                      (a full collection at most once a step)
GC_LEAK_P = 0.4  # automatic GC: a leak of Python objects with this chance, else thresholds
GC_LEAK_HEAP = 8.0  # a leak: the heap at most this many times the base one at the span's end
GC_DESYNC = (1, 4)  # planned GC: this many ranks (at most half, at least one) back on
#                     automatic GC
GC_RAMP_P = 0.5  # thresholds / desync: the rate climbs with this chance, else a step ...
GC_RAMP = (0.2, 0.6)  # ... linearly over this share of the span, ...
GC_RAMP_MAX = 200  # ... at most this many iterations

HD_NODE = 8  # ranks per node (a node's CPUs are capped together)
HD_CHUNKS = 4  # kernel groups per phase (forward, backward, optimizer) ...
HD_CHUNK_CONC = 4.0  # ... their shares of the phase's device and host time: Dirichlet
HD_BACKWARD = (1.8, 2.2)  # backward device time over forward ...
HD_OPT = (0.05, 0.3)  # ... and the optimizer's
HD_HOST_FWD = (0.35, 0.85)  # host (dispatch) time over device time: forward (Python) ...
HD_HOST_BWD = (0.1, 0.4)  # ... backward (launched from C++ by the autograd engine) ...
HD_HOST_OPT = (0.3, 1.0)  # ... optimizer (many small kernels, per parameter)
HD_HOST_JITTER = (0.01, 0.06)  # the host time's spread per rank, step and phase (log space)
HD_SPIKE_RATE = (1 / 600, 1 / 100)  # a host spike: chance per rank and step ...
HD_SPIKE_X = (2.0, 8.0)  # ... one phase's host time this many times longer
HD_COMM = (0.05, 0.25)  # exposed gradient all-reduce over the mean step ...
HD_COMM_JITTER = (0.02, 0.10)  # ... its spread (log space)
HD_SHAPE_P = 0.6  # a part after the first starts with another batch shape with this chance ...
HD_SHAPE = (0.7, 1.04)  # ... the device time this many times the previous part's
HD_HIDDEN = (0, 3)  # a CPU neighbour that comes and goes (healthy): episodes per series ...
HD_HIDDEN_ITERS = (50, 600)  # ... this long (log-uniform) ...
HD_HIDDEN_X = (0.1, 1.0)  # ... one rank's host time this much longer (halved until ...
HD_HIDDEN_RISE = 0.03  # ... the mean step over the episode rises by less than this)
HD_AROUND = 200  # ... and as far above the healthy steps this far before and after it ...
HD_AROUND_DROP = 4  # ... their longest few left out (host spikes, checkpoints, evaluations)
HD_KINDS = (("neighbour", 0.3), ("quota", 0.25), ("freq_cap", 0.25), ("sync", 0.2))
HD_WHO = (1, 4)  # a neighbour / a quota: this many ranks (at most half, at least one)
HD_NEIGHBOUR_JITTER = (0.2, 0.5)  # a neighbour's load fluctuates (log space, per step)
HD_NEIGHBOUR_DUTY = (0.2, 1.0)  # ... it runs in bursts: on this share of the steps ...
HD_NEIGHBOUR_RUN = (1.0, 20.0)  # ... in runs of this many steps on average (log-uniform)
HD_NEIGHBOUR_MAX = 8.0  # ... the host at most 1 + this times slower
HD_PERIOD_S = 0.1  # CFS bandwidth control: the quota's period (seconds) ...
HD_QUOTA_MAX = 0.95  # ... the throttled share of each period at most this
HD_FREQ_MAX = 3.0  # a capped CPU frequency: the host at most 1 + this times slower
HD_SYNC_EVERY = (1, 2, 4, 5, 10)  # metrics that sync: every this many steps ...
HD_SYNC_MAX = 6.0  # ... at most this many mean steps of host work ...
HD_SYNC_DEV = 0.1  # ... and this share of it on the device (small kernels)
HD_RAMP_P = 0.5  # neighbour / frequency cap: the slowdown climbs with this chance ...
HD_RAMP = (0.2, 0.6)  # ... linearly over this share of the span, ...
HD_RAMP_MAX = 200  # ... at most this many steps
# moe (module docstring): mixture-of-experts load imbalance under expert parallelism
ME_EXPERTS = (8, 16, 32, 64)  # experts of an MoE layer ...
ME_RANKS = (2, 4, 8, 16)  # ... spread evenly over this many expert-parallel ranks (at most E)
ME_LAYERS = (1, 2)  # groups of MoE layers with a router each (a group's layers route alike)
ME_TOKENS = (256.0, 4096.0)  # token assignments per expert, layer and step at balance
ME_DROPLESS_P = 0.5  # dropless routing (no capacity, no token dropped) with this chance, ...
ME_CAPACITY = (1.0, 1.25, 1.5, 2.0)  # ... else a capacity factor: tokens beyond it dropped,
ME_PAD_P = 0.5  # ... the experts' buffers padded to the capacity with this chance (the time
#                 then follows the capacity, not the load)
ME_SHARE = (0.3, 0.7)  # the MoE layers' share of a balanced step (all-to-alls, experts) ...
ME_FIXED = (0.05, 0.2)  # ... of which this share does not grow with the load (gate, latency)
ME_DOMAINS = (4, 16)  # data domains, each routing its tokens its own way: ...
ME_DOMAIN_SD = (0.3, 1.0)  # ... a preference (logit) per layer and expert with this sd
ME_MIX_CONC = (3.0, 50.0)  # a batch's mixture of domains: Dirichlet, this concentration
ME_BALANCE_TAU = (20.0, 300.0)  # the balancing loss pulls the gate back: this time constant
ME_BIAS_SD = (0.02, 0.15)  # ... the gate's bias wanders about balance with this sd (logit)
ME_COMM = (0.05, 0.2)  # exposed gradient all-reduce over the mean step ...
ME_COMM_JITTER = (0.02, 0.10)  # ... its spread (log space)
ME_RESTART_LEVEL = (0.85, 1.04)  # a planned restart's new expert-parallel size or capacity factor
#                                   (half and half): its mean busy time over the old one's
ME_DRIFTS = (0, 3)  # healthy: gate drifts per series that the balancing loss pulls back ...
ME_DRIFT_BUILD = (20, 200)  # ... building over this many steps (log-uniform) ...
ME_DRIFT_PUSH = (0.2, 1.5)  # ... one expert's bias per layer up by this (logit) ...
ME_DRIFT_RISE = 0.03  # ... kept where the mean step over it rises by less than this (halved)
ME_KINDS = (("collapse", 0.25), ("aux_off", 0.2), ("capacity", 0.3), ("domain", 0.2),
            ("slow_rank", 0.15))  # capacity only where there is one, the three before not
ME_FAVOURED = (1, 3)  # collapse: the router concentrates on this many experts a layer ...
ME_COLLAPSE_BUILD = (20, 400)  # ... the skew building over this many steps (log-uniform) ...
ME_COLLAPSE_MAX = 8.0  # ... their bias raised by at most this (logit)
ME_AUX_MAX = 40.0  # aux_off: the gate walks by at most this many times the healthy updates
ME_CAP_MAX = 20.0  # capacity: the factor raised to at most 1 + this times the old one
ME_DOMAIN_SHARE = (0.3, 1.0)  # domain: the new domain's share of every batch ...
ME_DOMAIN_MAX = 5.0  # ... its preferences (logit) with an sd of at most this ...
ME_DOMAIN_KEEP = (0.3, 0.8)  # ... and the share of its skew the balancing loss leaves
ME_RANK_MAX = 8.0  # slow_rank: its cost per token at most 1 + this times the healthy one
ME_RECOVER = (1, 30)  # collapse / aux_off: the gate back to balance over this many steps
ME_RAMP_P = 0.5  # domain / slow_rank: the slowdown climbs with this chance ...
ME_RAMP = (0.2, 0.6)  # ... linearly over this share of the span, ...
ME_RAMP_MAX = 200  # ... at most this many steps

HQ_BUCKETS = (8, 32)  # gradient buckets reduce-scattered in the backward pass (log-uniform int)
HQ_BUCKET_CONC = 8.0  # their shares of the backward compute and of the gradient bytes: Dirichlet
HQ_FORWARD = (0.4, 0.6)  # forward compute over the backward compute ...
HQ_OPT = (0.03, 0.12)  # ... and the optimizer step's (after the last reduce-scatter)
HQ_KERNEL_JITTER = (0.005, 0.02)  # a bucket's backward compute per step (log space)
HQ_COMM = (0.3, 0.85)  # the reduce-scatters at the nominal bandwidth over the backward compute
HQ_BW_JITTER = (0.02, 0.10)  # the bandwidth per step and bucket (log space)
HQ_CONGEST_RATE = (1 / 400, 1 / 80)  # a congestion spike starts with this chance per step ...
HQ_CONGEST_ITERS = (1, 5)  # ... lasts this many steps ...
HQ_CONGEST_X = (1.5, 4.0)  # ... the bandwidth divided by this (log-uniform)
HQ_SHARED_P = 0.3  # a configuration that leaves some reduce-scatters on the compute queue from
HQ_SHARED = (0.05, 0.4)  # the start (a level, not a change): on this share of the buckets
HQ_RESIZE = (0.7, 1.4)  # a planned restart: its buckets' bytes this many times the old ones
#                         (log-uniform), ...
HQ_RESIZE_RISE = 0.04  # ... kept where the part's mean step rises by less than this (halved)
HQ_KINDS = (("connections", 0.3), ("order", 0.2), ("bucket", 0.25), ("link", 0.25))
HQ_GROW = (0.25, 1.0)  # bucket: the share of the buckets whose bytes grow ...
HQ_GROW_MAX = 8.0  # ... to at most 1 + this times
HQ_LINK_MAX = 10.0  # link: the bandwidth divided by at most 1 + this
HQ_RAMP_P = 0.5  # bucket / link: the slowdown climbs with this chance ...
HQ_RAMP = (0.2, 0.6)  # ... linearly over this share of the span, ...
HQ_RAMP_MAX = 200  # ... at most this many steps

# compile (module docstring): torch.compile recompilations, graph breaks and eager fallback
CP_BUCKETS = (2, 8)  # sequence-length buckets: the shapes a batch comes in (inclusive) ...
CP_BUCKET_CONC = 1.0  # ... their frequencies: Dirichlet with this concentration (some rare)
CP_ATTN = (0.1, 1.0)  # a batch of the longest bucket costs 1 + this over the linear cost (a fixed
#                       token budget per batch: only the attention grows with the length)
CP_HOST = (0.02, 0.10)  # host time per step (guards, launches) over the compiled compute ...
CP_HOST_JITTER = (0.05, 0.2)  # ... its spread (log space)
CP_COMPILE = (2.0, 60.0)  # a cold compile of one graph: this many mean steps (log-uniform) ...
CP_COMPILE_SPREAD = 0.3  # ... each graph's own this much apart (log space) ...
CP_COMPILE_RANK = (0.05, 0.2)  # ... each rank's this much (log space): the step waits for the last
CP_CACHED = (0.15, 0.5)  # a restart with the same shapes: a compile from the on-disk cache costs
#                          this share of a cold one
CP_DYNAMIC_P = 0.4  # dynamic shapes: the second shape seen compiles a dynamic graph that serves
CP_DYNAMIC = (0.02, 0.06)  # every later one, this much slower than a static graph
CP_PARTIAL_P = 0.5  # the last batch of an epoch is partial (drop_last off) with this chance ...
CP_PARTIAL = (0.1, 0.9)  # ... this share of a batch (a new shape: compiled after each start)
CP_EPOCH = (300, 3000)  # steps per epoch
CP_EVAL_COMPILE = (0.5, 2.0)  # the evaluation graph: compiled at the first evaluation after each
#                               start, this many times a shape graph's compile
CP_COMM = (0.05, 0.2)  # exposed gradient all-reduce over the mean step ...
CP_COMM_JITTER = (0.02, 0.10)  # ... its spread (log space)
CP_RESHAPE_P = 0.5  # a planned restart with a new micro-batch count (every shape new: cold
#                     compiles) with this
CP_RESHAPE_LEVEL = (0.85, 1.04)  # chance, the busy time this many times the old one
CP_KINDS = (("eager", 0.35), ("thrash", 0.2), ("graph_break", 0.45))
CP_EAGER_ONE_P = 0.5  # eager: one shape's graph falls back with this chance, else every shape's
CP_EAGER_MAX = 1.0  # ... the compute and host time at most 1 + this times the compiled ones
CP_THRASH_STALL = (1.5, 12.0)  # thrash: a recompile costs this many mean steps (log-uniform) ...
CP_THRASH_MAX = 1.0  # ... at most one a step
CP_BREAK_MAX = 1.0  # graph break: the broken path's compute and host at most 1 + this times
CP_RAMP_P = 0.5  # graph break: the slowdown climbs with this chance (more batches take the ...
CP_RAMP = (0.2, 0.6)  # ... broken path) linearly over this share of the span, ...
CP_RAMP_MAX = 200  # ... at most this many steps

# power (module docstring): node power capping
PW_NODE = (1, 2, 4, 8)  # GPUs (ranks) of a node, sharing its power budget (at most the ranks)
PW_HEAVY = (0.4, 0.9)  # the clock-bound block (large matmuls) over the step's compute
PW_HOST = (0.02, 0.10)  # host time per step (not clock-bound) over the compute ...
PW_HOST_JITTER = (0.05, 0.2)  # ... its spread (log space)
PW_DRAW = (0.92, 1.0)  # the heavy block's draw at full clock over the node's cap (each node's
PW_DRAW_NODE = 0.01  # own, this much apart, log space) ...
PW_DRAW_JITTER = (0.005, 0.02)  # ... per node and step (log space)
PW_HEAVY_STEP_P = (0.02, 0.1)  # a heavier batch on a node: chance per step ...
PW_HEAVY_STEP_X = (1.05, 1.2)  # ... its draw this many times more (brief binding, spiky)
PW_STATIC = (0.2, 0.35)  # a GPU's static power over its draw at full clock; the rest ...
PW_KAPPA = (2.0, 3.0)  # ... grows as the clock to this power (the voltage follows the clock)
PW_MIN_CLOCK = 0.3  # the controller never sets the clock below this share
PW_TICK_S = (0.1, 1.0)  # the controller's period (seconds, log-uniform)
PW_WAVE_S = (3600.0, 86400.0)  # the inlet temperature's period (the chillers, the day) ...
PW_WAVE = (0.01, 0.03)  # ... the clock-bound time +-this (the boost clock backs off) ...
PW_LEAK = (0.5, 1.5)  # ... and the draw +-this x that (leakage grows with the temperature)
PW_BIN_P = 0.3  # a node whose GPUs are a slower bin from the start, with this chance ...
PW_BIN = (0.02, 0.04)  # ... their clock-bound time this much longer
PW_RESHAPE_LEVEL = (0.85, 1.04)  # ... another batch: the busy time this many times the old one
PW_KINDS = (("demand", 0.3), ("psu", 0.2), ("config", 0.25), ("cooling", 0.25))
PW_CAP_MAX = 4.0  # demand / psu: the node's cap divided by at most 1 + this
PW_DRAW_MAX = 1.0  # config: every node's draw at most 1 + this times
PW_HEAT_MAX = 1.0  # cooling: the node's draw at most 1 + this times at the top of its climb
PW_CLIMB = (0.3, 1.0)  # cooling: the draw climbs linearly over this share of the span

# numa (module docstring): host CPU placement, each rank's process pinned to its GPU's socket
NU_NODE = (1, 2, 4, 8)  # GPUs (ranks) of a node, two sockets (at most the ranks)
NU_HOST = (0.02, 0.30)  # host work on the step's path (Python dispatch, the batch handed over,
#                         pinned-memory staging) over the compute: small where device-bound ...
NU_HOST_JITTER = (0.03, 0.15)  # ... its spread (log space)
NU_COPY = (0.01, 0.06)  # exposed host-to-device copies of the batch over the compute ...
NU_COPY_JITTER = (0.02, 0.10)  # ... their spread (log space)
NU_FEED = (0.3, 0.75)  # the loader's time per batch (its workers' CPU time over their count)
#                        over the mean step: hidden while it stays below the step ...
NU_FEED_JITTER = (0.02, 0.08)  # ... its spread (log space)
NU_WORKERS = (2, 10)  # data-loader worker processes per rank (inclusive) ...
NU_CORES = (32, 48, 64, 96, 128, 192)  # ... on a node of this many cores (both sockets) ...
NU_THREADS = 1.5  # ... beside each rank's main thread and NCCL proxy (cores of CPU demand) ...
NU_FIT = 0.9  # ... the workers fewer where the node's demand would pass this share of its cores
NU_LOG_P = 0.5  # a rank that owns the logging / checkpoint thread, with this chance: ...
NU_LOG = (1.3, 2.5)  # ... its host work this many times the others' from the start
NU_WAVE_S = (3600.0, 86400.0)  # shared-node activity (the day, cron): its period (seconds) ...
NU_WAVE = (0.1, 0.5)  # ... each node's host work +-this (its own phase) ...
NU_WAVE_STEP = 0.03  # ... at most this share of the mean step
NU_KEEP_P = (1 / 50, 1 / 10)  # OS housekeeping (timers, kworkers): chance per rank and step ...
NU_KEEP = (0.02, 0.06)  # ... of a stall of this many mean steps (log-uniform)
NU_THP_P = (1 / 3000, 1 / 500)  # transparent-huge-page compaction: chance per rank and step ...
NU_THP = (0.2, 2.0)  # ... of a stall of this many mean steps (log-uniform)
NU_REWORK_LEVEL = (0.97, 1.04)  # ... another loader worker count: the busy time this many times
NU_KINDS = (("affinity", 0.3), ("balancing", 0.25), ("governor", 0.2), ("cojob", 0.25))
NU_REMOTE_MAX = 1.0  # affinity: remote memory and the inter-socket link, at most 1 + this x
NU_CLOCK_MAX = 1.5  # governor: the host's clock 1 / (1 + g), at most 2.5x lower
NU_COJOB_MAX = 8.0  # cojob: a CPU job's demand, at most this many times the node's cores
NU_MEMBW = 0.15  # cojob: the CPU work 1 + this x min(1, its demand) slower (caches, bandwidth)
NU_BURST = (3, 40)  # balancing: page migration in bursts of this many steps (log-uniform) ...
NU_BURST_X = (0.5, 3.0)  # ... the host work and copies 1 + this in a burst (log-uniform)
NU_CLIMB = (0.3, 1.0)  # balancing: the burst rate climbs linearly over this share of the span

# rollout (module docstring): reinforcement-learning steps bound by generation (RLHF / GRPO)
RO_TP = (1, 2, 4, 8)  # ranks of a generation worker (its engine's tensor parallelism; at most
#                       the ranks): the gather waits for the slowest worker
RO_HOST = (0.02, 0.08)  # host work (rule-based rewards, the gather's bookkeeping, logging) ...
RO_HOST_JITTER = (0.03, 0.15)  # ... its spread (log space)
RO_GEN = (0.5, 0.85)  # generation's share of the mean busy time (the rest: the training)
RO_SEQS = (32, 64, 128, 256)  # responses a worker decodes per step (prompts x samples each)
RO_MEDIAN = (1 / 16, 1 / 4)  # their lengths: median over the maximum length (log-uniform) ...
RO_SIGMA = (0.5, 1.2)  # ... log-normal spread, capped at the maximum
RO_PROMPT = (0.05, 0.5)  # a prompt's length over the maximum response length
RO_KV = (0.2, 1.0)  # a decode iteration's KV-cache read at a full cache over its weights' read
RO_RESIDENT = (0.5, 0.9)  # the share of the generated tokens resident at the cache's peak
RO_OCCUPANCY = (0.6, 1.0)  # the healthy demand's median over the cache's capacity ...
RO_CACHE_NODE = 0.03  # ... each worker's capacity this much apart (log space)
RO_PREEMPT = (0.5, 2.0)  # preemption: recompute of x (1 + x) times this many times the mean
#                          longest response's iterations (x: the demand over the capacity, - 1)
RO_SYNC_EVERY = (1, 2, 4, 5, 10)  # the new weights loaded into the engines every this many steps
RO_SYNC = (0.03, 0.15)  # ... taking this many mean steps ...
RO_SYNC_JITTER = (0.02, 0.10)  # ... its spread per worker and sync (log space)
RO_DRIFT = (-0.3, 0.6)  # the policy's response length: its median x exp(this) at the end of ...
RO_DRIFT_TAU = (0.2, 1.0)  # ... a climb 1 - exp(-t / tau), tau this share of the series, ...
RO_DRIFT_RISE = 0.03  # ... halved until the mean busy time (over 200 steps) moves by less
RO_DRIFT_HALVINGS = 8  # than this over the series (at most this many halvings, then none)
RO_RESHAPE_LEVEL = (0.97, 1.04)  # ... another batch: the busy time this many times the old one
RO_KINDS = (("cache", 0.3), ("reward", 0.25), ("degraded", 0.2), ("sync", 0.25))
RO_CACHE_MAX = 7.0  # cache: the worker's KV cache 1 / (1 + g), at most 8x smaller
RO_EPISODE = (3, 40)  # reward: the reward server's episodes, runs of this many steps ...
RO_EPISODE_X = (0.5, 3.0)  # ... the decode 1 + this slower in an episode (log-uniform)
RO_CLIMB = (0.3, 1.0)  # reward: the episodes' rate climbs linearly over this share of the span
RO_RATE_MAX = 2.0  # degraded: the worker's decode at most 1 + this times slower
RO_SYNC_MAX = 60.0  # sync: the worker's weight loads at most 1 + this times longer

# fabric (module docstring): inter-node collectives over a leaf / spine fabric, ECMP hashing
FB_RANKS = (2, 4, 8, 16)  # ranks of the job (at least two nodes: an inter-node ring)
FB_NODE = (1, 2, 4, 8)  # GPUs (ranks) of a node (at most half the ranks)
FB_LEAF = (1, 2, 4)  # the job's nodes under one leaf switch (at most half the nodes) ...
FB_UPLINKS = (4, 16)  # ... each leaf's uplinks to the spines: its ECMP group (inclusive)
FB_CHANNELS = (2, 4, 8, 16)  # flows of a ring edge between two leaves (NCCL channels, each
#                              its own queue pair and source port: hashed on its own)
FB_HEADROOM = (1.0, 2.0)  # an uplink's capacity over the job's even share of it (its flows over
#                           the uplinks, at least one flow at its NIC-bound rate; log-uniform)
FB_HOST = (0.02, 0.10)  # host time per step over the compute ...
FB_HOST_JITTER = (0.05, 0.2)  # ... its spread (log space)
FB_COMM = (0.1, 0.6)  # the ring all-reduce at its NIC-bound rate, over the mean compute ...
FB_HIDE = (0.2, 0.7)  # ... hidden behind the backward up to this share of the compute ...
FB_TAIL = (0.05, 0.25)  # ... but for its last bucket's share (exposed after the backward)
FB_JITTER = (0.02, 0.08)  # adaptive routing and flowlet jitter of the collective (log space)
FB_SPIKE_P = (1 / 400, 1 / 80)  # an incast micro-burst: chance per step ...
FB_SPIKE_X = (0.3, 2.0)  # ... the collective 1 + this longer (log-uniform)
FB_BG = (0.01, 0.1)  # other jobs' traffic: its mean share of an uplink's capacity ...
FB_BG_SD = (0.1, 0.5)  # ... each uplink's wandering: AR(1) in log space, stationary sd ...
FB_BG_PHI = (0.98, 0.998)  # ... and lag-1 correlation ...
FB_BG_MAX = 0.3  # ... at most this share
FB_RESTART_LEVEL = (1.0, 1.0)  # a planned restart keeps the batch (its new hashes move the level)
FB_MOVE_HEALTHY = 0.04  # a restart's new hashes are healthy where the mean busy time rises less
#                         than this; a label where it rises from NODE_SLOWDOWN[0] up to ...
FB_REHASH_MAX = NODE_SLOWDOWN[1] + SPAN_OVERSHOOT  # ... this, decidably; else drawn again
FB_KINDS = (("neighbour", 0.25), ("down", 0.5), ("degraded", 0.25))
FB_EPISODE = (2, 300)  # neighbour: a heavy job's episodes, runs of this many steps (log-uniform)
FB_EPISODE_X = (0.5, 2.0)  # ... each episode's traffic this many times g (log-uniform) ...
FB_DUTY = (0.1, 0.8)  # ... on this share of the runs (per series)
FB_NEIGHBOUR_MAX = 8.0  # neighbour: g, its flows on the shared uplink (fair share), at most this
FB_DOWN_MAX = 1.0  # down: g, the other jobs' traffic the down uplink carried (its capacity's
#                    share beyond their light traffic), at most this, moved with the job's
FB_RATE_MAX = 15.0  # degraded: the uplink's rate divided by at most 1 + this ...
FB_ERR = 0.05  # ... its errors: a step retransmits with chance this x g (at most FB_ERR_MAX) ...
FB_ERR_MAX = 0.5
FB_RETX = (0.5, 3.0)  # ... costing this many NIC-bound collectives (log-uniform)
FB_CLIMB = (0.3, 1.0)  # degraded: the optics degrade linearly over this share of the span

# nvme (module docstring): optimizer states offloaded to the node's local NVMe drive
NV_NODE = (1, 2, 4, 8)  # GPUs (ranks) of a node, their optimizer states on its drive
NV_HOST = (0.02, 0.10)  # host time per step over the compute ...
NV_HOST_JITTER = (0.05, 0.2)  # ... its spread (log space)
NV_IO = (0.15, 0.8)  # the optimizer's drive I/O (a read and a write of the states) per step
#                      at the fast rates, over the mean compute ...
NV_IO_JITTER = (0.02, 0.08)  # ... its spread per node and step (log space) ...
NV_WRITE = (0.4, 0.6)  # ... the write's share of it (into the SLC cache) ...
NV_NATIVE = (2.0, 6.0)  # ... a write past the cache (native TLC / QLC) this many times slower
NV_OPT = (0.2, 0.9)  # the optimizer's CPU update (sub-group by sub-group, the I/O pipelined
#                     with it) over the mean I/O at the fast rates ...
NV_TAIL = (0.05, 0.25)  # ... but for the last sub-group's share of the I/O (exposed after it)
NV_FOLD = (0.4, 1.3)  # the cache folded back in the drive's idle time of a step, over the
#                       step's write (under 1: sustained writing fills the cache) ...
NV_FILL = (10.0, 150.0)  # ... an empty cache filled in this many steps (log-uniform; its size
#                          this times the net fill, at least NV_FILL_NET of a step's write)
NV_FILL_NET = 0.05
NV_CACHE_NODE = 0.1  # each node's drive: its cache this much apart (log space)
NV_GC_P = (1 / 300, 1 / 50)  # a garbage-collection pause: chance per node and step ...
NV_GC_GROW = (0.0, 1.0)  # ... growing linearly by up to this share over the series (the
#                          drive fills) ...
NV_GC_X = (0.5, 3.0)  # ... a pause of this many native writes of the step's volume
NV_TAU_S = (20.0, 200.0)  # the drive's thermal time constant (seconds, log-uniform) ...
NV_TAU_STEPS = (5.0, 2000.0)  # ... in steps, within these
NV_THRESHOLD = (1.1, 1.5)  # the throttle's temperature rise over the healthy steady one
NV_RESHAPE_LEVEL = (0.97, 1.04)  # another batch at a restart: the compute this many times
NV_KINDS = (("worn", 0.35), ("tenant", 0.3), ("fan", 0.35))
NV_WORN_MAX = 4.0  # worn: the native rate 1 / (1 + g), GC 1 + g times as often, at most this
NV_EPISODE = (3, 400)  # tenant: another tenant's I/O (or a rebuild) in runs of this many steps
#                        (log-uniform) ...
NV_EPISODE_X = (0.5, 2.0)  # ... each episode's I/O this many times g (log-uniform) ...
NV_DUTY = (0.2, 0.9)  # ... on this share of the runs (per series)
NV_TENANT_MAX = 8.0  # tenant: g, its I/O over the job's, at most this (the bandwidth shared)
NV_FAN_MAX = 8.0  # fan: the drive's thermal resistance 1 + g times, at most this

# observe (module docstring): the job's own observability overhead (profiler, logs, metrics)
OB_NODE = (1, 2, 4, 8)  # GPUs (ranks) of a node
OB_HOST = (0.02, 0.10)  # host time per step over the compute ...
OB_HOST_JITTER = (0.05, 0.2)  # ... its spread (log space)
OB_FIRST_P = 0.5  # the observers: rank 0 alone with this chance, else each node's first rank
OB_PROF_P = 0.6  # a torch.profiler schedule on the observers with this chance ...
OB_PROF_EVERY = (50, 500)  # ... a cycle (wait, warmup, active) of this many steps (log-uniform)
OB_PROF_WARMUP = (1, 2)  # ... its warmup steps (the profiler on, nothing kept; inclusive) ...
OB_PROF_ACTIVE = (1, 5)  # ... its active (recording) steps (inclusive) ...
OB_PROF_X = (0.2, 3.0)  # ... an active step's compute and host 1 + this times (log-uniform) ...
OB_PROF_WARM = (0.1, 0.4)  # ... a warmup step's overhead this share of an active one's ...
OB_EXPORT = (0.3, 1.0)  # ... the trace exported after the active steps: this many mean steps
#                         per active step (log-uniform; on the step after them) ...
OB_PROF_SHARE = 0.05  # ... the cycle made longer until its overhead is at most this of it
OB_LOG = (0.002, 0.02)  # the observers' log lines, written synchronously: mean steps a step ...
OB_LOG_JITTER = (0.1, 0.5)  # ... their spread (log space)
OB_FLUSH_EVERY = (10, 20, 50, 100)  # metrics exported / logs flushed every this many steps ...
OB_FLUSH = (0.02, 0.3)  # ... a stall of this many mean steps (log-uniform, each)
OB_BAR_S = (0.001, 0.005)  # a progress bar's refresh on rank 0 (seconds, log-uniform) ...
OB_BAR_EVERY_S = 0.1  # ... at most once in this many seconds (tqdm's mininterval)
OB_EVAL_CALLS = (0.5, 3.0)  # an evaluation step's collectives: this many times more
OB_RESHAPE_LEVEL = (0.97, 1.04)  # another batch at a restart: the busy time this many times
OB_KINDS = (("profiler", 0.25), ("anomaly", 0.2), ("nccl_debug", 0.15), ("nfs_log", 0.25),
            ("log_growth", 0.15))
OB_ACTIVE_MAX = 0.6  # profiler: left active, every step's compute and host 1 + g, at most this
OB_ANOMALY_MAX = 2.0  # anomaly: every rank's compute and host 1 + g times, at most this
OB_NCCL_MAX = 0.3  # nccl_debug: g mean steps a step at the mean collective count, at most this
OB_EPISODE_S = (2.0, 120.0)  # nfs_log: the filesystem slow in runs of this many seconds (in
#                               steps, at least one; log-uniform) ...
OB_EPISODE_X = (0.5, 2.0)  # ... each episode's write latency 1 + g x this (log-uniform) ...
OB_DUTY = (0.2, 0.9)  # ... on this share of the runs (per series)
OB_NFS_MAX = 1000.0  # nfs_log: g at most this (a 1-20 ms write stalled for seconds)
OB_GROW_MAX = 1000.0  # log_growth: the log lines 1 + g w times, w climbing over the span

# -- training across sites over a wide-area link (wan) -----------------------------------------
WN_RANKS = (4, 8, 16)  # ranks of the job: at least two sites of at least two ranks
WN_SITE = (2, 4, 8)  # ranks of a site (at most half the ranks): an island with its own fabric
WN_HOST = (0.02, 0.10)  # host time per step over the compute ...
WN_HOST_JITTER = (0.05, 0.2)  # ... its spread (log space)
WN_INNER = (0.1, 0.5)  # a site's all-reduce over its own fabric, every step, over the compute ...
WN_INNER_JITTER = (0.02, 0.08)  # ... its spread per site and step (log space) ...
WN_HIDE = (0.2, 0.7)  # ... hidden behind the backward up to this share of the compute ...
WN_TAIL = (0.05, 0.25)  # ... but for its last bucket's share
WN_OUTER = (20, 500)  # the outer step: every H inner steps (log-uniform) ...
WN_STREAM_P = 0.6  # ... streamed in fragments with this chance (Streaming DiLoCo) ...
WN_FRAGMENTS = (2, 4, 8, 16)  # ... of the model, one synchronised every H / P steps ...
WN_FRAGMENT_MIN = 5  # ... at most every this many steps (fewer fragments where H is short)
WN_LATENCY_S = (0.005, 0.08)  # one-way latency between sites (seconds, log-uniform), paid
#                               2 ceil(log2(sites)) times a sync (halving-doubling across sites)
WN_VOLUME = (0.5, 20.0)  # an outer step's bytes over the WAN's full bandwidth, in mean steps
WN_HIER_P = 0.4  # hierarchical data parallelism instead (every step), with this chance where ...
WN_HIER_LAT = 0.5  # ... a sync's latency term is under this many mean steps (sites close by) ...
WN_HIER_VOLUME = (0.1, 0.6)  # ... its bytes over the full bandwidth (mean steps), behind the
#                              backward up to WN_HIDE of the compute but for WN_WTAIL of it
WN_SPIKE = 0.4  # a sync costs at most this x sqrt(steps between syncs) mean steps (H raised
#                 first, up to WN_OUTER[1], then the volume capped: an expensive sync is rare)
WN_BDP = (1.2, 4.0)  # the transfer's window over the bandwidth-delay product (log-uniform)
WN_JITTER = (0.05, 0.2)  # the sync's spread (log space) ...
WN_PARETO_ALPHA = (2.5, 4.0)  # ... times 1 + a Pareto (Lomax) tail of this index ...
WN_PARETO_SCALE = (0.05, 0.3)  # ... times this
WN_WAVE_S = (3600.0, 86400.0)  # the WAN's available bandwidth: a wave of this period
#                                (seconds, log-uniform: the day, or hourly bulk transfers) ...
WN_WAVE = (0.1, 0.6)  # ... dipping by this share at its busiest ...
WN_WAVE_RISE = 0.03  # ... halved until the mean busy time (moving mean over about 400 steps)
WN_WAVE_HALVINGS = 6  # moves by less than this over the series (else no wave)
WN_OVERLAP_P = 0.5  # the sync overlapped with the next inner steps with this chance ...
WN_WINDOW = (1, 20)  # ... its window (steps, log-uniform; at most the steps between syncs) ...
WN_WTAIL = (0.05, 0.25)  # ... at least this share of it exposed (the outer update) ...
WN_ETA = (0.2, 1.0)  # ... and the site's all-reduce 1 + this x the window's use slower meanwhile
WN_RESHAPE_LEVEL = (0.97, 1.04)  # another batch at a restart: the busy time this many times
WN_KINDS = (("route", 0.3), ("peak", 0.25), ("circuit", 0.3), ("fabric", 0.15))
WN_ROUTE_MAX = 15.0  # route: the latency 1 + g times (a longer path), at most this
WN_PEAK_MAX = 15.0  # peak: the bandwidth 1 / (1 + g hump) at the hump's top, at most this
WN_CIRCUIT_MAX = 15.0  # circuit: the bandwidth 1 / (1 + g), at most this
WN_FABRIC_MAX = 15.0  # fabric: a site's all-reduce 1 + g times slower, at most this ...
WN_CLIMB = (0.3, 1.0)  # ... climbing linearly over this share of the span
WN_LAST_RISE = 0.2  # the first part's last try: a site's fabric at this rise over its whole room
#                     (clear of the rule where the wave moves the steps around it a little)

# -- the host-device PCIe path of each GPU (pcie) ------------------------------------------------
PC_NODE = (1, 2, 4, 8)  # GPUs (ranks) of a node, two behind each PCIe switch (with a NIC)
PC_HOST = (0.02, 0.10)  # host time per step over the compute ...
PC_HOST_JITTER = (0.05, 0.2)  # ... its spread (log space)
PC_BATCH = (0.01, 0.04)  # variable-length batches: each rank's batch per step (log-normal sd,
#                          mean 1): its compute and its transfers with it
PC_H2D = (0.03, 0.2)  # the batch's pinned-memory host-to-device copy at the link's full rate,
#                       over the mean compute ...
PC_OFFLOAD_P = 0.4  # ... plus activation / optimizer offload over the same link, with this
PC_OFFLOAD = (0.1, 0.6)  # chance, this much of the mean compute at the full rate
PC_HIDE = (0.3, 0.9)  # the copy stream's transfers hidden behind this share of the compute ...
PC_TAIL = (0.05, 0.3)  # ... but for their last share (the batch the step starts with)
PC_AER = (0.003, 0.03)  # correctable-error (AER) replays: each transfer 1 + this x ...
PC_AER_ALPHA = (1.5, 3.0)  # ... a Lomax draw of this index (heavy-tailed) ...
PC_AER_MAX = 1.0  # ... at most 1 + this
PC_UPSTREAM = (1.0, 1.6)  # a switch's upstream link over one GPU link: while the two GPUs'
#                           transfers overlap each gets half of it, an overlapped unit costing
#                           2 / upstream - 1 more ...
PC_BEAT = (100, 3000)  # ... the phase between the two ranks' copies drifting by a whole step
#                        every this many steps (log-uniform, each switch its own, either way) ...
PC_PHASE_JITTER = 0.02  # ... plus this (a share of the step, normal) per step
PC_BEAT_RISE = 0.03  # the contention halved until no rank's mean busy time (moving means over
PC_BEAT_HALVINGS = 6  # 200 steps) moves by this over the series (at most this many halvings)
PC_HIDDEN_P = 0.5  # a link trained down (x16 -> x8 or Gen5 -> Gen4: half the rate) on one rank
#                    with this chance per series, until the next restart ...
PC_HIDDEN_RISE = 0.06  # ... kept where its rank's mean busy time (moving means over 200 steps)
#                        moves by less than this (its transfers hidden behind the compute)
PC_RESHAPE_LEVEL = (0.97, 1.04)  # another batch at a restart: the busy time this many times
PC_KINDS = (("downtrain", 0.4), ("storm", 0.2), ("neighbour", 0.4))
PC_DOWN_MAX = 3.0  # downtrain: the link's rate 1 / (2 (1 + g)), g at most this (x16 -> x2)
PC_STORM_MAX = 60.0  # storm: the transfers' replays 1 + g h, h a hump over the span, g at most
PC_STORM_JITTER = (0.3, 0.8)  # this; varying from step to step (log-normal sd, mean 1)
PC_EPISODE = (2, 300)  # neighbour: its traffic in runs of this many steps (log-uniform) ...
PC_EPISODE_X = (0.5, 2.0)  # ... each episode's this many times g (log-uniform) ...
PC_DUTY = (0.2, 0.9)  # ... on this share of the runs (per series)
PC_NEIGHBOUR_MAX = 8.0  # neighbour: the switch's two GPUs' transfers 1 + g x slower, g at most

# -- a cloud VM's steal time (steal) --------------------------------------------------------------
ST_VM = (1, 2, 4)  # GPUs (ranks) of a VM, on a host of ST_HOST_GPUS GPUs (the VM's share of it)
ST_HOST_GPUS = 8
ST_HOST = (0.05, 0.3)  # the launch thread's CPU time per step over the compute ...
ST_HOST_JITTER = (0.05, 0.2)  # ... its spread (log space)
ST_HIDE = (0.3, 0.9)  # the launch queue runs ahead of the device by this share of the compute ...
ST_TAIL = (0.05, 0.3)  # ... but for the launch thread's last share (the step's first kernels)
ST_FEED = (0.3, 0.75)  # the loader's CPU time per batch over its workers, over the mean step
ST_FEED_JITTER = (0.03, 0.15)  # ... its spread (log space, mean 1)
ST_UTIL = (0.3, 0.8)  # the VM's vCPUs busy this share of the time (its own demand on the host)
ST_LOAD = (0.6, 1.1)  # the host's healthy demand over its physical CPUs (every VM's vCPUs)
ST_QUANTUM_S = (0.001, 0.03)  # a co-tenant's time slice on a physical CPU (log-uniform, seconds)
ST_WANDER_SD = (0.05, 0.2)  # the co-tenants' demand: AR(1) in log space, this stationary sd ...
ST_WANDER_PHI = (0.99, 0.999)  # ... and lag-1 correlation ...
ST_TENANCY = (100, 3000)  # ... tenants come and go: a level held this many steps (log-uniform) ...
ST_TENANT_SD = 0.3  # ... each its own (normal, log space) ...
ST_WAVE_S = (3600.0, 86400.0)  # ... and a wave of this period (log-uniform, seconds) ...
ST_WAVE = (0.1, 0.5)  # ... of this amplitude (log space)
ST_RISE = 0.05  # the co-tenants' variation (and the maintenance's dirty-page overhead) halved
ST_HALVINGS = 6  # until no rank's mean busy time (moving means over 200 steps, the blackouts
#                  left out) moves by this over the series (at most this many halvings)
ST_MAINT_P = 0.5  # a series has host maintenance on its VMs with this chance: ...
ST_MAINT = (1, 2)  # ... this many live migrations, each on one VM: ...
ST_PRECOPY_S = (5.0, 120.0)  # ... a pre-copy of this long (log-uniform, seconds, per series) ...
ST_DIRTY = (0.05, 0.3)  # ... in which dirty-page logging makes the VM's CPU work this much slower
ST_BLACKOUT_S = (0.05, 5.0)  # ... then the VM frozen this long (log-uniform, seconds)
ST_RESHAPE_LEVEL = (0.97, 1.04)  # another batch at a restart: the busy time this many times
ST_KINDS = (("neighbour", 0.4), ("packing", 0.3), ("migrated", 0.3))
ST_DEMAND_MAX = 4.0  # the co-tenants' added demand g (host CPUs' worth) at most this
ST_EPISODE = (5, 300)  # neighbour: its demand in runs of this many steps (log-uniform) ...
ST_EPISODE_X = (0.5, 2.0)  # ... each run's this many times g (log-uniform) ...
ST_DUTY = (0.3, 1.0)  # ... on this share of the runs (per series)
ST_PACK = (2, 5)  # packing: this many tenants arrive, each g / k, evenly over the climb ...
ST_CLIMB = (0.3, 1.0)  # ... over this share of the span

FAMILIES: tuple[str, ...] = ("restart", "ckpt_stall", "flapping", "staircase", "noise_regime",
                             "sampled", "multirank", "greyhound", "failslow", "ramp", "short",
                             "hump", "warmup_onset", "reconfig", "ckpt_burst", "contention",
                             "megatron", "bimodal_replay", "ladder", "seqlen", "accum",
                             "memory", "prefetch", "pipeline", "lossy_link", "gc_pause",
                             "dispatch", "moe", "hw_queue", "compile", "power", "numa",
                             "rollout", "fabric", "nvme", "observe", "wan", "pcie",
                             "steal")
#: Families held out in the current round of issue 29: never looked at while the detector was
#: changed (only evaluated; ``steal`` was written and committed before the twenty-fifth
#: round's changes, by someone who never ran the detector on it).  The others, ``pcie`` (held
#: out in the twenty-fourth round), ``wan`` (the twenty-third), ``observe`` (the
#: twenty-second), ``nvme`` (the twenty-first), ``fabric`` (the twentieth), ``rollout`` (the
#: nineteenth), ``numa`` (the eighteenth), ``power`` (the seventeenth), ``compile`` (the
#: sixteenth), ``hw_queue`` (the fifteenth), ``moe`` (the fourteenth), ``dispatch`` (the
#: thirteenth), ``gc_pause`` (the twelfth), ``lossy_link`` (the eleventh), ``pipeline`` (the
#: tenth), ``prefetch`` (the ninth), ``memory`` (the eighth), ``accum`` (the seventh),
#: ``seqlen`` (the sixth), ``ladder`` (the fifth), ``bimodal_replay`` (the fourth),
#: ``megatron`` (the third), ``contention`` (the second), ``hump``, ``warmup_onset``,
#: ``reconfig`` and ``ckpt_burst`` (the first round) included, are the families it was built
#: and tuned on.
HELD_OUT: tuple[str, ...] = ("steal",)

#: (family, scenario, series per seed at scale 1, positive)
SCENARIOS: tuple[tuple[str, str, int, bool], ...] = (
    ("restart", "replay", 10, False),
    ("restart", "repartition", 10, False),
    ("restart", "replay_slow", 12, True),
    ("ckpt_stall", "stalls", 12, False),
    ("ckpt_stall", "stalls_slow", 12, True),
    ("flapping", "flap", 14, True),
    ("flapping", "isolated", 10, False),
    ("staircase", "schedule", 12, False),
    ("staircase", "schedule_step", 12, True),
    ("noise_regime", "regime", 12, False),
    ("noise_regime", "regime_step", 12, True),
    ("sampled", "single", 6, False),
    ("sampled", "single_step", 6, True),
    ("sampled", "mean", 6, False),
    ("sampled", "mean_step", 6, True),
    ("multirank", "healthy", 10, False),
    ("multirank", "one_slow", 12, True),
    ("multirank", "all_slow", 3, True),
    ("greyhound", "injected", 16, True),
    ("greyhound", "spikes_only", 8, False),
    ("failslow", "comp", 12, True),
    ("failslow", "comm", 12, True),
    ("failslow", "minor", 8, False),
    ("ramp", "thermal", 14, True),
    ("ramp", "schedule", 8, False),
    ("short", "strong", 14, True),
    ("short", "stalls", 8, False),
    ("hump", "hump", 14, True),
    ("hump", "small", 6, False),
    ("warmup_onset", "onset", 12, True),
    ("warmup_onset", "healthy", 8, False),
    ("reconfig", "renumber", 8, False),
    ("reconfig", "renumber_slow", 10, True),
    ("ckpt_burst", "shift", 14, True),
    ("ckpt_burst", "bursts", 8, False),
    ("ckpt_burst", "minor", 4, False),
    ("contention", "slow", 14, True),
    ("contention", "episodes", 10, False),
    ("megatron", "slow", 14, True),
    ("megatron", "healthy", 10, False),
    ("bimodal_replay", "slow", 14, True),
    ("bimodal_replay", "healthy", 10, False),
    ("ladder", "congested", 14, True),
    ("ladder", "healthy", 10, False),
    ("seqlen", "slow", 14, True),
    ("seqlen", "healthy", 10, False),
    ("accum", "slow", 14, True),
    ("accum", "healthy", 10, False),
    ("memory", "slow", 14, True),
    ("memory", "healthy", 10, False),
    ("prefetch", "slow", 14, True),
    ("prefetch", "healthy", 10, False),
    ("pipeline", "slow", 14, True),
    ("pipeline", "healthy", 10, False),
    ("lossy_link", "slow", 14, True),
    ("lossy_link", "healthy", 10, False),
    ("gc_pause", "slow", 14, True),
    ("gc_pause", "healthy", 10, False),
    ("dispatch", "slow", 14, True),
    ("dispatch", "healthy", 10, False),
    ("moe", "slow", 14, True),
    ("moe", "healthy", 10, False),
    ("hw_queue", "slow", 14, True),
    ("hw_queue", "healthy", 10, False),
    ("compile", "slow", 14, True),
    ("compile", "healthy", 10, False),
    ("power", "slow", 14, True),
    ("power", "healthy", 10, False),
    ("numa", "slow", 14, True),
    ("numa", "healthy", 10, False),
    ("rollout", "slow", 14, True),
    ("rollout", "healthy", 10, False),
    ("fabric", "slow", 14, True),
    ("fabric", "healthy", 10, False),
    ("nvme", "slow", 14, True),
    ("nvme", "healthy", 10, False),
    ("observe", "slow", 14, True),
    ("observe", "healthy", 10, False),
    ("wan", "slow", 14, True),
    ("wan", "healthy", 10, False),
    ("pcie", "slow", 14, True),
    ("pcie", "healthy", 10, False),
    ("steal", "slow", 14, True),
    ("steal", "healthy", 10, False),
)


@dataclass(frozen=True)
class JobEvent:
    """A labelled slow period in job iterations ``[start_iter, end_iter)``."""

    start_iter: int
    end_iter: int
    loss: float
    peak_loss: float
    kind: str
    ranks: tuple[int, ...] = ()  # the slow ranks; empty: every rank


@dataclass(frozen=True)
class JobSeries:
    """One labelled record stream (arrays in feed order, one entry per record).

    ``ts`` is NaN where the records carry no timestamp, ``duration`` NaN where they carry no
    duration.  ``level`` is the noise-free time of each record (healthy x events; for means,
    the mean over the window) and ``healthy`` the same without the events."""

    name: str
    family: str
    scenario: str
    seed: int
    rank: np.ndarray
    iter: np.ndarray
    ts: np.ndarray
    duration: np.ndarray
    stride: int
    mean_of_stride: bool
    events: tuple[JobEvent, ...]
    level: np.ndarray = field(repr=False)
    healthy: np.ndarray = field(repr=False)
    ranks: int = 1
    restarts: int = 0
    dropped: int = 0

    @property
    def positive(self) -> bool:
        return any(e.kind != "minor" for e in self.events)

    def records(self) -> Iterator[IterationRecord]:
        """The records as :class:`IterationRecord` (NaN fields left out)."""
        ts = self.ts.tolist()
        du = self.duration.tolist()
        for r, i, t, d in zip(self.rank.tolist(), self.iter.tolist(), ts, du, strict=True):
            yield IterationRecord(rank=r, iter=i, ts=None if t != t else t,
                                  duration=None if d != d else d)


# -- the timeline of executed iterations --------------------------------------------------------
@dataclass
class _Timeline:
    """Executed iterations (index ``t``, restarts included) of ``ranks`` ranks."""

    iters: np.ndarray  # (n,) job iteration number of executed iteration t
    healthy: np.ndarray  # (n,) noise-free healthy time (or (ranks, n): each rank's own)
    factor: np.ndarray  # (ranks, n) event factor
    pause: np.ndarray  # (n,) downtime before iteration t (seconds)
    protect: np.ndarray  # (n,) True where records must not be dropped
    events: list[JobEvent]
    noise_scale: np.ndarray | None = None  # (n,) time-varying noise scale (else per rank)
    restarts: int = 0


def _wandering_compute(rng: np.random.Generator, t: np.ndarray, wander_sd: tuple[float, float],
                       wander_phi: tuple[float, float], jitter: tuple[float, float],
                       warm_amplitude: tuple[float, float], warm_tau: tuple[float, float],
                       first: tuple[float, float]) -> np.ndarray:
    """The compute time of iterations ``t`` (mean 1): a slowly wandering rate (AR(1) in log
    space, its sd and lag-1 correlation drawn from ``wander_sd`` / ``wander_phi``), log-normal
    jitter (``jitter``, mean kept) and the warm-up (``1 + A exp(-t / tau)``, the first
    iteration ``first`` times more). The draws come in this order (the generators that use it
    keep their bytes)."""
    n = t.size
    sd, phi = float(rng.uniform(*wander_sd)), float(rng.uniform(*wander_phi))
    wander = lfilter([sd * math.sqrt(1.0 - phi * phi)], [1.0, -phi], rng.standard_normal(n))
    jit = float(rng.uniform(*jitter))
    warm = 1.0 + rng.uniform(*warm_amplitude) * np.exp(-t / rng.uniform(*warm_tau))
    warm[0] *= rng.uniform(*first)
    return np.asarray(np.exp(wander + jit * rng.standard_normal(n) - 0.5 * jit * jit) * warm)


def _loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _loguniforms(rng: np.random.Generator, lo: float, hi: float, size: int | tuple[int, ...]
                 ) -> np.ndarray:
    """``size`` draws log-uniform in ``[lo, hi]`` (the array form of :func:`_loguniform`)."""
    return np.asarray(np.exp(rng.uniform(math.log(lo), math.log(hi), size)))


def _logint(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(round(_loguniform(rng, lo, hi)))


def _new_timeline(rng: np.random.Generator, n: int, ranks: int = 1,
                  start_iter: int = 1) -> _Timeline:
    base = _loguniform(rng, *BASE_S)
    healthy = np.full(n, base)
    _rewarm(rng, healthy, 0)
    return _Timeline(iters=np.arange(start_iter, start_iter + n, dtype=np.int64),
                     healthy=healthy, factor=np.ones((ranks, n)), pause=np.zeros(n),
                     protect=np.zeros(n, dtype=bool), events=[])


def _rewarm(rng: np.random.Generator, healthy: np.ndarray, t0: int) -> int:
    """The warm-up of a start or restart at ``t0``; returns its hump length."""
    healthy[t0] *= rng.uniform(*FIRST_ITER_FACTOR)
    amp = rng.uniform(*HUMP_AMPLITUDE)
    length = int(rng.integers(HUMP_ITERS[0], HUMP_ITERS[1] + 1))
    j = np.arange(length)
    seg = healthy[t0 + 1:t0 + 1 + length]
    seg *= 1.0 + amp * (1.0 - j[:seg.size] / length) ** 2
    return length


def _label(tl: _Timeline, a: int, b: int, loss: float, kind: str | None = None,
           ranks: tuple[int, ...] = (), apply: bool = True) -> None:
    """Make executed iterations ``[a, b)`` slow by ``loss`` (on ``ranks``; all when empty)
    and label them."""
    rows = list(ranks) if ranks else list(range(tl.factor.shape[0]))
    if apply:
        tl.factor[rows, a:b] /= 1.0 - loss
    tl.protect[max(0, a - 5):b + 5] = True
    peak = 1.0 - 1.0 / float(tl.factor[rows, a:b].max())
    if kind is None:
        kind = "step" if loss >= EVENT_LOSS else "minor"
    tl.events.append(JobEvent(start_iter=int(tl.iters[a]), end_iter=int(tl.iters[b - 1]) + 1,
                              loss=float(loss), peak_loss=float(peak), kind=kind,
                              ranks=tuple(ranks)))


def _slow_step(rng: np.random.Generator, tl: _Timeline, lo: int, hi: int,
               ranks: tuple[int, ...] = ()) -> None:
    """A step slowdown (:data:`SLOW_LOSS`, :data:`SLOW_ITERS`) inside executed ``[lo, hi)``."""
    dur = min(_logint(rng, *SLOW_ITERS), max(MIN_EVENT_ITERS, hi - lo - 1))
    a = int(rng.integers(lo, max(lo + 1, hi - dur)))
    _label(tl, a, min(a + dur, tl.iters.size), float(rng.uniform(*SLOW_LOSS)), ranks=ranks)


def _n(rng: np.random.Generator) -> int:
    return int(rng.integers(SERIES_ITERS[0], SERIES_ITERS[1] + 1))


# -- families -----------------------------------------------------------------------------------
def _restart(rng: np.random.Generator, scenario: str) -> _Timeline:
    n = _n(rng) + 1000
    ckpt = int(rng.choice(CKPT_INTERVAL))
    k = int(rng.integers(RESTARTS[0], RESTARTS[1] + 1))
    seg = n // (k + 1)  # restart positions (executed index): segments of similar length
    cuts = sorted(int(seg * (j + 1) + rng.integers(-seg // 4, seg // 4 + 1)) for j in range(k))
    bounds = [0, *cuts, n]
    tl = _new_timeline(rng, n)
    iters = np.empty(n, dtype=np.int64)
    replayed = 0
    settle = [LEAD_ITERS]  # executed iterations after a segment's start before an event
    cur = 1
    level = 1.0
    repart_at = int(rng.integers(0, k)) if scenario == "repartition" else -1
    for j in range(k + 1):
        a, c = bounds[j], bounds[j + 1]
        iters[a:c] = np.arange(cur, cur + c - a)
        tl.healthy[a:c] *= level
        if j > 0:
            hump = _rewarm(rng, tl.healthy, a)
            settle.append(max(hump + 150, replayed + 20))
            tl.protect[max(0, a - 10):a + 10] = True
        if c == n:
            break
        last = cur + c - a - 1
        cur = ((last - 1) // ckpt) * ckpt + 1  # resume after the last checkpoint (<= last)
        replayed = last - cur + 1
        tl.pause[c] = rng.uniform(*RESTART_DOWNTIME_S)
        if j == repart_at or (scenario != "repartition" and rng.random() < REPARTITION_P):
            change = rng.uniform(*REPARTITION)
            level *= 1.0 + change if rng.random() < 0.5 else 1.0 - change
    tl.iters = iters
    tl.restarts = k
    if scenario == "replay_slow":
        # a slow period in one segment, after its re-warm-up and the iterations it replays,
        # ending before the iterations that the next restart replays
        j = int(rng.integers(0, k + 1))
        lo = bounds[j] + settle[j]
        hi = bounds[j + 1] - (ckpt + 20 if j < k else 0)
        if hi - lo < MIN_EVENT_ITERS + 50:  # segment too short: the last one is long enough
            lo, hi = bounds[k] + settle[k], n
        _slow_step(rng, tl, lo, hi)
    return tl


def _ckpt_stall(rng: np.random.Generator, scenario: str) -> _Timeline:
    n = _n(rng)
    tl = _new_timeline(rng, n)
    every = int(rng.integers(STALL_EVERY[0], STALL_EVERY[1] + 1))
    first = int(rng.integers(every // 2, every + 1))
    for s in range(first, n, every):
        length = int(rng.integers(STALL_ITERS[0], STALL_ITERS[1] + 1))
        tl.healthy[s:s + length] *= rng.uniform(*STALL_FACTOR)
    if scenario == "stalls_slow":
        _slow_step(rng, tl, LEAD_ITERS, n)
    return tl


def _flapping(rng: np.random.Generator, scenario: str) -> _Timeline:
    n = _n(rng)
    tl = _new_timeline(rng, n)
    if scenario == "isolated":
        for _ in range(int(rng.integers(ISOLATED_STALLS[0], ISOLATED_STALLS[1] + 1))):
            s = int(rng.integers(LEAD_ITERS, n - 10))
            tl.healthy[s:s + int(rng.integers(1, 6))] *= rng.uniform(*STALL_FACTOR)
        return tl
    window = min(int(rng.integers(FLAP_WINDOW[0], FLAP_WINDOW[1] + 1)), n - LEAD_ITERS - 100)
    a = int(rng.integers(LEAD_ITERS, n - window - 50))
    loss = float(rng.uniform(*FLAP_LOSS))
    t = a
    end = a
    while t < a + window:
        slow = int(rng.integers(FLAP_PHASE[0], FLAP_PHASE[1] + 1))
        tl.factor[:, t:t + slow] /= 1.0 - loss
        end = t + slow
        t = end + int(rng.integers(FLAP_PHASE[0], FLAP_PHASE[1] + 1))
    _label(tl, a, end, loss, kind="flapping", apply=False)
    return tl


def _staircase(rng: np.random.Generator, scenario: str) -> _Timeline:
    span = int(rng.integers(STAIR_SPAN[0], STAIR_SPAN[1] + 1))
    lead = LEAD_ITERS + 100
    n = lead + span + int(rng.integers(300, 801))
    tl = _new_timeline(rng, n)
    total = rng.uniform(*STAIR_TOTAL)
    lo = max(STAIR_STEPS[0], math.ceil(total / STAIR_STEP[1]))
    hi = min(STAIR_STEPS[1], math.floor(total / STAIR_STEP[0]))
    steps = int(rng.integers(lo, hi + 1))
    at = np.sort(rng.choice(np.arange(lead, lead + span), size=steps, replace=False))
    inc = np.full(steps, total / steps)
    ramp = np.zeros(n)
    np.add.at(ramp, at, inc)
    tl.healthy *= 1.0 + np.cumsum(ramp)
    if scenario == "schedule_step":
        _slow_step(rng, tl, LEAD_ITERS, n)
    return tl


def _noise_regime(rng: np.random.Generator, scenario: str) -> _Timeline:
    n = _n(rng)
    tl = _new_timeline(rng, n)
    low = rng.uniform(*REGIME_LOW)
    high = rng.uniform(*REGIME_HIGH)
    c = int(rng.integers(LEAD_ITERS + 200, n - 500))
    scale = np.empty(n)
    first, second = (low, high) if rng.random() < 0.6 else (high, low)
    scale[:c] = first
    scale[c:] = second
    if rng.random() < 0.3:  # and back again
        c2 = int(rng.integers(c + 200, n - 100))
        scale[c2:] = first
    tl.noise_scale = scale
    if scenario == "regime_step":
        _slow_step(rng, tl, LEAD_ITERS, n)
    return tl


def _sampled(rng: np.random.Generator, scenario: str, stride: int) -> _Timeline:
    records = int(rng.integers(SAMPLED_RECORDS[0], SAMPLED_RECORDS[1] + 1))
    n = records * stride
    tl = _new_timeline(rng, n, start_iter=1)
    if scenario.endswith("_step"):
        shortest = max(MIN_EVENT_ITERS, SAMPLED_EVENT_RECORDS * stride + stride)
        dur = max(shortest, min(_logint(rng, SLOW_ITERS[0], SLOW_ITERS[1] * max(1, stride // 5)),
                                n // 3))
        a = int(rng.integers(max(LEAD_ITERS, 20 * stride), n - dur - stride))
        _label(tl, a, a + dur, float(rng.uniform(*SLOW_LOSS)))
    return tl


def _multirank(rng: np.random.Generator, scenario: str) -> _Timeline:
    ranks = int(rng.integers(RANKS[0], RANKS[1] + 1))
    n = int(rng.integers(1500, 3001))
    tl = _new_timeline(rng, n, ranks=ranks)
    if scenario == "one_slow":
        _slow_step(rng, tl, LEAD_ITERS, n, ranks=(int(rng.integers(0, ranks)),))
    elif scenario == "all_slow":
        _slow_step(rng, tl, LEAD_ITERS, n)
    return tl


def _greyhound(rng: np.random.Generator, scenario: str) -> _Timeline:
    n = int(rng.integers(2500, 6001))
    tl = _new_timeline(rng, n)
    if scenario == "spikes_only":
        if rng.random() < 0.5:
            dur = _logint(rng, MIN_EVENT_ITERS, 500)
            a = int(rng.integers(LEAD_ITERS, n - dur - 1))
            _label(tl, a, a + dur, float(rng.uniform(*GREY_MINOR_LOSS)))
        return tl
    periods = int(rng.integers(GREY_PERIODS[0], GREY_PERIODS[1] + 1))
    prev: tuple[int, int] | None = None
    free = LEAD_ITERS
    for _ in range(periods):
        if free >= n - 2 * MIN_EVENT_ITERS - 1:
            break
        dur = min(_logint(rng, *GREY_ITERS), n - free - MIN_EVENT_ITERS - 1)
        dur = max(dur, MIN_EVENT_ITERS)
        if prev is not None and prev[1] - prev[0] > 2 * MIN_EVENT_ITERS and (
                rng.random() < GREY_OVERLAP_P):
            a = int(rng.integers(prev[0] + MIN_EVENT_ITERS, prev[1] - MIN_EVENT_ITERS + 1))
        else:
            a = int(rng.integers(free, max(free + 1, n - dur - 1)))
        b = min(a + dur, n - 1)
        minor = rng.random() < GREY_MINOR_P
        loss = float(rng.uniform(*(GREY_MINOR_LOSS if minor else GREY_LOSS)))
        _label(tl, a, b, loss, kind="minor" if minor else "injected")
        prev = (a, b)
        free = b + 50
    return tl


# -- issue 29 families (module docstring) ------------------------------------------------------
#: In these families an event is required when the iteration time rises by at least 10 %
#: (the detector's ``threshold`` is relative time): a throughput loss of 1 - 1/1.1.
SLOWDOWN_EVENT = 0.10


def _slowdown_label(tl: _Timeline, a: int, b: int, s: float, kind: str,
                    ranks: tuple[int, ...] = ()) -> None:
    """Label executed ``[a, b)`` (its factor already applied) with a mean time increase ``s``
    (of ``ranks``; empty: every rank)."""
    _label(tl, a, b, s / (1.0 + s), kind=kind if s >= SLOWDOWN_EVENT else "minor",
           ranks=ranks, apply=False)


def _quiet_timeline(healthy: np.ndarray, factor: np.ndarray,
                    events: list[tuple[int, int, float, str]],
                    who: list[tuple[int, ...]] | None = None) -> _Timeline:
    """The timeline of a generator with noise of its own (the corpus' noise turned off:
    ``noise_scale`` ~ 0): one iteration per point, ``factor`` the slowdown of each (``(n,)``,
    one rank, or ``(ranks, n)`` with ``healthy`` the same shape), and each event ``(a, b,
    rise, kind)`` labelled by its span's rise (:func:`_slowdown_label`), on the ranks ``who``
    gives it (none given: every rank)."""
    n = healthy.shape[-1]
    tl = _Timeline(iters=np.arange(1, n + 1, dtype=np.int64), healthy=healthy,
                   factor=np.atleast_2d(factor), pause=np.zeros(n),
                   protect=np.zeros(n, dtype=bool), events=[], noise_scale=np.full(n, 1e-6))
    for (a, b, s, kind), ranks in zip(events, who or [()] * len(events), strict=True):
        _slowdown_label(tl, a, b, s, kind, ranks)
    return tl


def _slots(rng: np.random.Generator, lo: int, hi: int, k: int, length: int
           ) -> list[int]:
    """``k`` starts in ``[lo, hi - length)``, one in each of ``k`` equal parts (so that the
    episodes neither overlap nor touch)."""
    part = (hi - lo) // k
    out = []
    for j in range(k):
        a0 = lo + j * part
        a1 = a0 + part - length - 60
        if a1 > a0:
            out.append(int(rng.integers(a0, a1)))
    return out


def _failslow(rng: np.random.Generator, scenario: str) -> _Timeline:
    n = _n(rng)
    tl = _new_timeline(rng, n)
    k = int(rng.integers(FS_EPISODES[0], FS_EPISODES[1] + 1))
    for a in _slots(rng, LEAD_ITERS, n, k, FS_ITERS[1]):
        dur = _logint(rng, *FS_ITERS)
        if scenario == "minor":
            s = float(rng.uniform(*FS_MINOR))
            tl.factor[:, a:a + dur] *= 1.0 + s
            _label(tl, a, a + dur, s / (1.0 + s), kind="minor", apply=False)
            continue
        s = float(rng.uniform(*FS_SLOWDOWN))
        # compute: the compute share f runs s / f slower, evenly (contention varies a little);
        # communication: the exposed share 1 - f runs s / (1 - f) slower, bursty, and the
        # congestion builds over a few iterations.  Either way the iteration is 1 + s x jitter.
        sigma = float(rng.uniform(*(FS_COMP_JITTER if scenario == "comp" else FS_COMM_JITTER)))
        z = rng.standard_normal(dur) * sigma - 0.5 * sigma * sigma
        shape = np.exp(z)
        if scenario == "comm":
            build = int(rng.integers(1, 6))
            shape[:build] *= (np.arange(build) + 1.0) / (build + 1.0)
        tl.factor[:, a:a + dur] *= 1.0 + s * shape
        _slowdown_label(tl, a, a + dur, s, "failslow")
    return tl


def _thermal(rng: np.random.Generator, scenario: str) -> _Timeline:
    n = _n(rng)
    tl = _new_timeline(rng, n)
    if scenario == "schedule":
        total = float(rng.uniform(*DRIFT_TOTAL))
        span = min(int(rng.integers(DRIFT_ITERS[0], DRIFT_ITERS[1] + 1)), n - LEAD_ITERS - 100)
        a = int(rng.integers(LEAD_ITERS, n - span))
        x = np.clip((np.arange(n) - a) / span, 0.0, 1.0)
        smooth = rng.random() < 0.5  # a cosine schedule, or linear
        tl.healthy *= 1.0 + total * ((1.0 - np.cos(np.pi * x)) / 2.0 if smooth else x)
        return tl
    ramp = _logint(rng, *RAMP_ITERS)
    s = float(rng.uniform(*RAMP_SLOWDOWN))
    hold = _logint(rng, *RAMP_HOLD)
    a = int(rng.integers(LEAD_ITERS, max(LEAD_ITERS + 1, n - ramp - hold - 50)))
    hold = max(MIN_EVENT_ITERS, min(hold, n - a - ramp - 1))
    t = np.arange(ramp + hold, dtype=float)
    level = s * (1.0 - np.exp(-3.0 * t / ramp))  # heating: the clock falls, then holds
    b = a + ramp + hold
    tl.factor[:, a:b] *= 1.0 + level
    cool = min(max(1, ramp // 2), n - b)
    if cool > 0:  # and cools back
        tl.factor[:, b:b + cool] *= 1.0 + level[-1] * np.exp(-3.0 * np.arange(cool) / cool)
    _slowdown_label(tl, a, b, s, "ramp")
    return tl


def _short(rng: np.random.Generator, scenario: str) -> _Timeline:
    n = _n(rng)
    tl = _new_timeline(rng, n)
    every = int(rng.integers(SHORT_STALL_EVERY[0], SHORT_STALL_EVERY[1] + 1))
    for st in range(int(rng.integers(every // 2, every + 1)), n, every):
        tl.healthy[st:st + int(rng.integers(SHORT_STALL_ITERS[0], SHORT_STALL_ITERS[1] + 1))
                   ] *= rng.uniform(*STALL_FACTOR)
    if scenario == "strong":
        k = int(rng.integers(SHORT_EPISODES[0], SHORT_EPISODES[1] + 1))
        for a in _slots(rng, LEAD_ITERS, n, k, SHORT_ITERS[1]):
            dur = int(rng.integers(SHORT_ITERS[0], SHORT_ITERS[1] + 1))
            s = float(rng.uniform(*SHORT_SLOWDOWN))
            tl.factor[:, a:a + dur] *= 1.0 + s
            _slowdown_label(tl, a, a + dur, s, "short")
    return tl


def _hump(rng: np.random.Generator, scenario: str) -> _Timeline:
    n = _n(rng)
    tl = _new_timeline(rng, n)
    k = int(rng.integers(1, 4))
    longest = HUMP_RISE[1] + HUMP_HOLD[1] + HUMP_DECAY[1]
    for a in _slots(rng, LEAD_ITERS, n, k, longest):
        rise = int(rng.integers(HUMP_RISE[0], HUMP_RISE[1] + 1))
        hold = int(rng.integers(HUMP_HOLD[0], HUMP_HOLD[1] + 1))
        decay = int(rng.integers(HUMP_DECAY[0], HUMP_DECAY[1] + 1))
        s = float(rng.uniform(*(HUMP_MINOR if scenario == "small" else HUMP_SLOWDOWN)))
        up = (np.arange(rise) + 1.0) / rise
        down = 1.0 - (np.arange(decay) + 1.0) / (decay + 1.0)
        shape = np.concatenate([up, np.ones(hold), down])
        tl.factor[:, a:a + shape.size] *= 1.0 + s * shape
        _label(tl, a, a + shape.size, s / (1.0 + s),
               kind="hump" if s >= SLOWDOWN_EVENT else "minor", apply=False)
    return tl


def _warmup_onset(rng: np.random.Generator, scenario: str) -> _Timeline:
    n = _n(rng)
    tl = _new_timeline(rng, n)  # its warm-up: a first slow iteration and a decaying hump
    if scenario == "onset":
        a = int(rng.integers(WARM_ONSET_AT[0], WARM_ONSET_AT[1] + 1))
        dur = _logint(rng, *WARM_SLOW_ITERS)
        s = float(rng.uniform(*WARM_SLOWDOWN))
        tl.factor[:, a:a + dur] *= 1.0 + s
        _slowdown_label(tl, a, a + dur, s, "warmup")
    return tl


def _reconfig(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Restarts that come back reconfigured: another healthy level and iteration numbers that
    start again at 1, jump ahead (a new job's counter) or resume from a checkpoint."""
    n = _n(rng) + 1000
    k = int(rng.integers(RESTARTS[0], RESTARTS[1] + 1))
    seg = n // (k + 1)
    bounds = [0, *(seg * (j + 1) + int(rng.integers(-seg // 4, seg // 4 + 1)) for j in range(k)),
              n]
    tl = _new_timeline(rng, n)
    iters = np.empty(n, dtype=np.int64)
    cur, level, lo = 1, 1.0, LEAD_ITERS
    for j in range(k + 1):
        a, c = bounds[j], bounds[j + 1]
        iters[a:c] = np.arange(cur, cur + c - a)
        tl.healthy[a:c] *= level
        if j > 0:
            lo = a + _rewarm(rng, tl.healthy, a) + 150
            tl.protect[max(0, a - 10):a + 10] = True
        if c == n:
            break
        tl.pause[c] = rng.uniform(*RESTART_DOWNTIME_S)
        change = rng.uniform(*RECONFIG_LEVEL)
        level *= 1.0 + change if rng.random() < 0.5 else 1.0 - change
        last = cur + c - a - 1
        # positives keep the numbers of the slow segment unique (scoring is by number)
        mode = rng.choice(["one", "ahead", "resume"] if scenario == "renumber"
                          else ["ahead", "resume"])
        if mode == "one":
            cur = 1
        elif mode == "ahead":
            cur = last + int(rng.integers(2000, 100001))
        else:
            cur = max(1, last - int(rng.integers(0, 100)))
    tl.iters = iters
    tl.restarts = k
    if scenario == "renumber_slow" and n - lo > MIN_EVENT_ITERS + 60:
        _slow_step(rng, tl, lo, n)
    return tl


def _ckpt_burst(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Compute + communication generated here (module docstring); the corpus' own noise is
    turned off (``noise_scale`` ~ 0): the series' noise is this generator's."""
    n = _n(rng)
    tl = _new_timeline(rng, n)  # its healthy level and warm-up hump
    f = float(rng.uniform(*CB_COMP_FRACTION))
    sd, phi = float(rng.uniform(*CB_COMP_SIGMA)), float(rng.uniform(*CB_COMP_PHI))
    comp = np.exp(lfilter([sd * math.sqrt(1.0 - phi * phi)], [1.0, -phi],
                          rng.standard_normal(n)))
    alpha = float(rng.uniform(*CB_PARETO_ALPHA))
    comm = 1.0 + float(rng.uniform(*CB_PARETO_SCALE)) * (rng.pareto(alpha, n) - 1.0 / (alpha - 1))
    comm = np.maximum(comm, 0.2)
    # bursts: a two-state chain, entered with chance p, left after 1-4 iterations
    starts = np.flatnonzero(rng.random(n) < rng.uniform(*CB_BURST_P))
    burst = np.ones(n)
    lengths = rng.integers(CB_BURST_ITERS[0], CB_BURST_ITERS[1] + 1, starts.size)
    heights = rng.uniform(*CB_BURST_FACTOR, starts.size)
    for a, k, h in zip(starts.tolist(), lengths.tolist(), heights.tolist(), strict=True):
        burst[a:a + k] = np.maximum(burst[a:a + k], h)
    slow_comp, slow_comm = np.ones(n), np.ones(n)
    every = int(rng.integers(CB_CKPT_EVERY[0], CB_CKPT_EVERY[1] + 1))
    ckpts = np.arange(int(rng.integers(every // 2, every + 1)), n, every)
    shift: tuple[int, int, float] | None = None
    if scenario in ("shift", "minor"):
        s = float(rng.uniform(*(CB_MINOR if scenario == "minor" else CB_SHIFT)))
        dur = _logint(rng, *CB_SHIFT_ITERS)
        after = ckpts[(ckpts >= LEAD_ITERS) & (ckpts < n - dur - 60)]
        if after.size:
            c = int(rng.choice(after))
            a = c + CB_CKPT_ITERS[1] + int(rng.integers(5, every // 2 + 1))
            if a + MIN_EVENT_ITERS > n:  # drawn past the end: the earliest start there is
                a = c + CB_CKPT_ITERS[1] + 5
            if rng.random() < 0.5:  # compute: its share runs s / f slower
                slow_comp[a:a + dur] = 1.0 + s / f
            else:  # communication: its share runs s / (1 - f) slower
                slow_comm[a:a + dur] = 1.0 + s / (1.0 - f)
            shift = (a, min(a + dur, n), s)
    healthy_it = f * comp + (1.0 - f) * comm * burst
    it = f * comp * slow_comp + (1.0 - f) * comm * burst * slow_comm
    save = np.ones(n)
    for c in ckpts.tolist():
        save[c:c + int(rng.integers(CB_CKPT_ITERS[0], CB_CKPT_ITERS[1] + 1))] = rng.uniform(
            *CB_CKPT_FACTOR)
    tl.healthy *= healthy_it * save
    tl.factor[:, :] *= it / healthy_it
    tl.noise_scale = np.full(n, 1e-6)
    if shift is not None:  # the iteration's factor varies with the bursts: not a "step"
        a, b, s = shift
        _slowdown_label(tl, a, b, s, "shift")
    return tl


def _contention(rng: np.random.Generator, scenario: str) -> _Timeline:
    """A replay-style trace (module docstring): its own healthy level, warm-up and noise; the
    corpus' noise is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n, dtype=float)
    warm = 1.0 + rng.uniform(*CT_WARM_AMPLITUDE) * np.exp(-t / rng.uniform(*CT_WARM_TAU))
    warm[0] *= rng.uniform(*CT_FIRST)
    # the noise scale wanders: a random walk of log(scale), smoothed, folded into its range
    lo, hi = math.log(CT_SIGMA[0]), math.log(CT_SIGMA[1])
    walk = np.cumsum(rng.standard_normal(n) * CT_SIGMA_STEP) + rng.uniform(lo, hi)
    walk = lfilter([0.05], [1.0, -0.95], walk - walk[0]) + walk[0]
    span = hi - lo
    folded = np.abs((walk - lo) % (2.0 * span) - span)  # reflect into [0, span]
    sigma = np.exp(hi - folded)
    alpha = float(rng.uniform(*CT_PARETO_ALPHA))
    tail = 1.0 + rng.uniform(*CT_PARETO_SCALE) * (rng.pareto(alpha, n) - 1.0 / (alpha - 1.0))
    noise = np.exp(sigma * rng.standard_normal(n) - 0.5 * sigma * sigma) * np.maximum(tail, 0.5)
    tl = _Timeline(iters=np.arange(1, n + 1, dtype=np.int64),
                   healthy=_loguniform(rng, *BASE_S) * warm * noise, factor=np.ones((1, n)),
                   pause=np.zeros(n), protect=np.zeros(n, dtype=bool), events=[],
                   noise_scale=np.full(n, 1e-6))
    busy = np.zeros(n, dtype=bool)  # no episode overlaps or touches another one
    if scenario == "slow":
        k = int(rng.integers(1, 4))
        part = (n - LEAD_ITERS) // k
        for j in range(k):  # one in each of k equal parts, 40 healthy iterations after it
            a0 = LEAD_ITERS + j * part
            a = a0 + int(rng.integers(0, part // 3))
            dur = min(_logint(rng, *CT_SLOW_ITERS), a0 + part - a - 40)
            s = float(rng.uniform(*CT_SLOWDOWN))
            shape, x = _shape(rng, dur, CT_RAMP_RISE, CT_HUMP_RISE, CT_HUMP_DECAY)
            tl.factor[:, a:a + dur] *= 1.0 + s * x
            busy[max(0, a - 30):a + dur + 30] = True
            _slowdown_label(tl, a, a + dur, s, "shift" if shape == "step" else shape)
    at = 0
    while True:
        at += int(rng.geometric(rng.uniform(*CT_EPISODE_RATE)))
        longest = MIN_EVENT_ITERS - 1
        if scenario == "slow" and rng.random() < CT_LONG_P and at >= LEAD_ITERS:
            longest = 60
        length = _logint(rng, 2, longest)
        if at + length >= n:
            break
        if busy[max(0, at - 2):at + length + 2].any():
            continue
        height = float(rng.uniform(*CT_EPISODE_RISE))
        sd = float(rng.uniform(*CT_EPISODE_JITTER))
        x = np.exp(rng.standard_normal(length) * sd - 0.5 * sd * sd)
        tl.factor[:, at:at + length] *= 1.0 + height * x
        busy[at:at + length] = True
        if length > CT_STALL_MAX:  # mean rise of the episode as labelled
            mean = float(np.mean(x)) * height
            kind = ("contention" if length >= MIN_EVENT_ITERS and mean >= SLOWDOWN_EVENT
                    else "minor")
            _label(tl, at, at + length, mean / (1.0 + mean), kind=kind, apply=False)
        at += length
    return tl


def _megatron(rng: np.random.Generator, scenario: str) -> _Timeline:
    """A Megatron-like log replay (module docstring): the iteration is a sum of components, a
    slowdown slows one of them; the corpus' noise is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n, dtype=float)
    wc = float(rng.uniform(*MG_COMP_SHARE))
    wa = min(float(rng.uniform(*MG_AR_SHARE)), 0.95 - wc)
    wo = 1.0 - wc - wa  # optimizer step, logging: fixed work
    sd, phi = float(rng.uniform(*MG_COMP_SIGMA)), float(rng.uniform(*MG_COMP_PHI))
    rate = lfilter([sd * math.sqrt(1.0 - phi * phi)], [1.0, -phi], rng.standard_normal(n))
    jit = float(rng.uniform(*MG_COMP_JITTER))
    warm = 1.0 + rng.uniform(*MG_WARM_AMPLITUDE) * np.exp(-t / rng.uniform(*MG_WARM_TAU))
    comp = np.exp(rate + jit * rng.standard_normal(n)) * warm
    # all-reduce: a fast and a slow path (e.g. a ring within or across switches), chosen per
    # iteration by a two-state chain (the previous path kept with chance ``stay``)
    p, x = float(rng.uniform(*MG_AR_SLOW_P)), float(rng.uniform(*MG_AR_SLOW_X))
    stay = float(rng.uniform(*MG_AR_STAY))
    draw = rng.random(n) < p
    keep = rng.random(n) < stay
    slow = draw.copy()
    for i in np.flatnonzero(keep[1:]).tolist():  # the kept ones copy their predecessor
        slow[i + 1] = slow[i]
    ajit = float(rng.uniform(*MG_AR_JITTER))
    ar = np.where(slow, x, 1.0) * np.exp(ajit * rng.standard_normal(n) - 0.5 * ajit * ajit)
    ar /= 1.0 + p * (x - 1.0)  # mean 1 (the stationary share of the slow path is p)
    # data-loader stalls: geometric inter-arrival, 1-2 iterations each
    dl = np.zeros(n)
    at = int(rng.integers(0, 50))
    mean_every = float(rng.uniform(*MG_DL_EVERY))
    while True:
        at += int(rng.geometric(1.0 / mean_every))
        if at >= n:
            break
        k = int(rng.integers(MG_DL_ITERS[0], MG_DL_ITERS[1] + 1))
        dl[at:at + k] += _loguniform(rng, *MG_DL_STALL) / k
    parts = {"compute": wc * comp, "allreduce": wa * ar, "dataloader": dl}
    healthy_it = parts["compute"] + parts["allreduce"] + parts["dataloader"] + wo
    healthy_it[0] *= rng.uniform(*MG_FIRST)
    it = healthy_it.copy()
    events: list[tuple[int, int, float, str]] = []
    if scenario == "slow":
        k = int(rng.integers(1, 4))
        part = (n - LEAD_ITERS) // k
        for j in range(k):  # one in each of k equal parts, 40 healthy iterations after it
            a0 = LEAD_ITERS + j * part
            a = a0 + int(rng.integers(0, part // 3))
            dur = min(_logint(rng, *MG_SLOW_ITERS), a0 + part - a - 40)
            s = float(rng.uniform(*MG_SLOWDOWN))
            shape, xs = _shape(rng, dur, MG_RAMP_RISE, MG_HUMP_RISE, MG_HUMP_DECAY)
            which = str(rng.choice(["compute", "allreduce", "dataloader"]))
            seg = slice(a, a + dur)
            if which == "dataloader":  # the input pipeline falls behind: a wait every step
                it[seg] += s * xs
            else:  # the component runs slower by s over its mean share
                w = wc if which == "compute" else wa
                it[seg] += parts[which][seg] * (s / w) * xs
            events.append((a, a + dur, s, shape))
    tl = _Timeline(iters=np.arange(1, n + 1, dtype=np.int64),
                   healthy=_loguniform(rng, *BASE_S) * healthy_it,
                   factor=(it / healthy_it)[None, :],
                   pause=np.zeros(n), protect=np.zeros(n, dtype=bool), events=[],
                   noise_scale=np.full(n, 1e-6))
    for a, b, s, shape in events:  # the rise of the iteration time over its healthy mean
        _slowdown_label(tl, a, b, s, "shift" if shape == "step" else shape)
    return tl


def _shape(rng: np.random.Generator, dur: int, ramp_rise: tuple[int, int],
           hump_rise: tuple[int, int], hump_decay: tuple[int, int]) -> tuple[str, np.ndarray]:
    """A slowdown's shape over ``dur`` iterations (0-1 of its plateau): step, ramp (rising
    over ``ramp_rise`` iterations) or hump (rising over ``hump_rise``, decaying over
    ``hump_decay``), each bound drawn uniformly and capped by the episode's length."""
    shape = str(rng.choice(["step", "ramp", "hump"]))
    xs = np.ones(dur)
    if shape == "ramp":
        rise = min(int(rng.integers(ramp_rise[0], ramp_rise[1] + 1)), dur // 2)
        xs[:rise] = (np.arange(rise) + 1.0) / rise
    elif shape == "hump":
        rise = min(int(rng.integers(hump_rise[0], hump_rise[1] + 1)), dur // 3)
        decay = min(int(rng.integers(hump_decay[0], hump_decay[1] + 1)), dur // 3)
        xs[:rise] = (np.arange(rise) + 1.0) / rise
        xs[dur - decay:] = 1.0 - (np.arange(decay) + 1.0) / (decay + 1.0)
    return shape, xs


def _bimodal_replay(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Healthy modes visited by a Markov chain of random dwells (module docstring); the
    corpus' noise is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    k = int(rng.integers(BM_MODES[0], BM_MODES[1] + 1))
    mult = np.concatenate([[1.0], 1.0 + np.sort(rng.uniform(*BM_GAP, k - 1))])
    lo = np.array([_logint(rng, BM_DWELL[0], BM_DWELL[1] // 4) for _ in range(k)])
    hi = np.minimum(np.array([lo[j] * rng.uniform(*BM_DWELL_SPAN) for j in range(k)]),
                    BM_DWELL[1]).astype(int)
    hi = np.maximum(hi, lo + 1)
    mode = np.empty(n, dtype=np.int64)
    at, m = 0, int(rng.integers(0, k))
    while at < n:
        dwell = _logint(rng, int(lo[m]), int(hi[m]))
        mode[at:at + dwell] = m
        at += dwell
        m = int(rng.choice([j for j in range(k) if j != m]))
    t = np.arange(n, dtype=float)
    warm = 1.0 + rng.uniform(*BM_WARM_AMPLITUDE) * np.exp(-t / rng.uniform(*BM_WARM_TAU))
    warm[0] *= rng.uniform(*BM_FIRST)
    sd, df = float(rng.uniform(*BM_JITTER)), float(rng.uniform(*BM_JITTER_DF))
    jit = np.exp(sd * rng.standard_t(df, n) / math.sqrt(df / (df - 2.0)))
    healthy = _loguniform(rng, *BASE_S) * mult[mode] * warm * jit
    # the healthy mean: each mode weighted by its share of the time
    mean = float(np.mean(mult[mode]))
    factor = np.ones(n)
    events: list[tuple[int, int, float, str]] = []
    if scenario == "slow":
        ne = int(rng.integers(1, 4))
        part = (n - LEAD_ITERS) // ne
        for j in range(ne):  # one in each of ne equal parts, 40 healthy iterations after it
            a0 = LEAD_ITERS + j * part
            a = a0 + int(rng.integers(0, part // 3))
            stuck = float(mult[-1] / mean - 1.0)
            if rng.random() < BM_STUCK_P and stuck >= SLOWDOWN_EVENT:  # the highest
                # mode's dwell becomes permanent (when that is a slowdown of the mean)
                dur = min(_logint(rng, *BM_STUCK_ITERS), a0 + part - a - 40)
                factor[a:a + dur] = mult[-1] / mult[mode[a:a + dur]]
                events.append((a, a + dur, stuck, "stuck"))
                continue
            dur = min(_logint(rng, *BM_SLOW_ITERS), a0 + part - a - 40)
            s = float(rng.uniform(*BM_SLOWDOWN))
            shape, xs = _shape(rng, dur, BM_RAMP_RISE, BM_HUMP_RISE, BM_HUMP_DECAY)
            factor[a:a + dur] = 1.0 + s * xs
            events.append((a, a + dur, s, "shift" if shape == "step" else shape))
    return _quiet_timeline(healthy, factor, events)


def _ladder_rise(rng: np.random.Generator, rungs: tuple[int, int], total: tuple[float, float],
                 rung: tuple[float, float], mean_min: float) -> np.ndarray:
    """The rise of the iteration time over one congestion ladder, iteration by iteration:
    rungs of ``rung`` each (redrawn until they add up to ``total``), each held
    :data:`LD_RUNG_ITERS`, the top held :data:`LD_TOP_ITERS` (longer where the mean rise over
    the whole ladder would fall below ``mean_min``), then released at once or rung by rung."""
    while True:  # a few draws at most: rungs inside their bounds that add up to ``total``
        k = int(rng.integers(rungs[0], rungs[1] + 1))
        heights = rng.uniform(*rung, k)
        if total[0] <= heights.sum() <= total[1]:
            break
    cum = np.cumsum(heights)
    up = np.array([_logint(rng, *LD_RUNG_ITERS) for _ in range(k - 1)], dtype=np.int64)
    top = _logint(rng, *LD_TOP_ITERS)
    if rng.random() < LD_ABRUPT_P:
        down_lv, down = np.zeros(0), np.zeros(0, dtype=np.int64)
    else:
        down_lv = cum[-2::-1]
        down = np.array([_logint(rng, *LD_DOWN_ITERS) for _ in range(k - 1)], dtype=np.int64)
    # the top long enough for the mean over the ladder: (shoulders + T x top) / (D + top)
    shoulders = float(cum[:-1] @ up + down_lv @ down)
    span = int(up.sum() + down.sum())
    need = math.ceil((mean_min * span - shoulders) / (cum[-1] - mean_min)) if mean_min else 0
    top = max(top, need, MIN_EVENT_ITERS)
    levels = np.concatenate([cum, down_lv])
    return np.repeat(levels, np.concatenate([up, [top], down]))


def _ladder(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Congestion that builds and clears flow by flow, on a wandering level with volatility
    bursts (module docstring); the corpus' noise is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng) + 500
    t = np.arange(n, dtype=float)
    # the healthy level wanders slowly, bounded: a squashed AR(1) in log space
    sd, phi = float(rng.uniform(*LD_WANDER_SD)), float(rng.uniform(*LD_WANDER_PHI))
    x = lfilter([sd * math.sqrt(1.0 - phi * phi)], [1.0, -phi], rng.standard_normal(n))
    x += sd * rng.standard_normal() * phi ** t  # the AR(1) started at its stationary law
    wander = np.exp(LD_WANDER_BOUND * np.tanh(x / LD_WANDER_BOUND))
    warm = 1.0 + rng.uniform(*LD_WARM_AMPLITUDE) * np.exp(-t / rng.uniform(*LD_WARM_TAU))
    warm[0] *= rng.uniform(*LD_FIRST)
    every = int(rng.choice(LD_EVAL_EVERY))
    evals = np.ones(n)
    at = np.arange(every - 1, n, every)
    evals[at] = _loguniforms(rng, *LD_EVAL_X, at.size)
    # volatility bursts: the jitter's scale rises (soft edges), its mean stays 1
    vol = np.zeros(n)
    for _ in range(int(rng.integers(LD_VOL_BURSTS[0], LD_VOL_BURSTS[1] + 1))):
        length = _logint(rng, *LD_VOL_ITERS)
        a = int(rng.integers(0, n - length))
        vol[a:a + length] = np.maximum(vol[a:a + length], math.log(rng.uniform(*LD_VOL_X)))
    vol = np.convolve(vol, np.ones(LD_VOL_EDGE) / LD_VOL_EDGE, mode="same")
    # the ladders: one part of the series each (40 healthy iterations after), light flows
    # (never an event) in some of the other parts
    parts = max(1, min(3, (n - LEAD_ITERS) // LD_PART))
    part = (n - LEAD_ITERS) // parts
    major = set()
    if scenario == "congested":
        major = set(rng.choice(parts, size=int(rng.integers(1, min(2, parts) + 1)),
                               replace=False).tolist())
    rise, light = np.zeros(n), np.zeros(n)
    events: list[tuple[int, int]] = []
    for j in range(parts):
        a0 = LEAD_ITERS + j * part
        if j not in major and rng.random() >= LD_SMALL_P:
            continue
        while True:  # a ladder that fits in its part, 40 healthy iterations after it
            if j in major:
                r = _ladder_rise(rng, LD_RUNGS, LD_TOTAL, LD_RUNG, LD_MEAN_MIN)
            else:
                r = _ladder_rise(rng, LD_SMALL_RUNGS, LD_SMALL_TOTAL,
                                 (0.01, LD_SMALL_TOTAL[1]), 0.0)
            if r.size <= part - 40:
                break
        a = a0 + int(rng.integers(0, part - 40 - r.size + 1))
        (rise if j in major else light)[a:a + r.size] = r
        if j in major:
            events.append((a, a + r.size))
    sigma = float(rng.uniform(*LD_SIGMA))
    scale = np.minimum(sigma * np.exp(vol) * (1.0 + LD_CONGEST_JITTER * (rise + light)),
                       LD_SIGMA_MAX)
    ph = float(rng.uniform(*LD_SIGMA_PHI))
    z = lfilter([math.sqrt(1.0 - ph * ph)], [1.0, -ph], rng.standard_normal(n))
    jitter = np.exp(scale * z - 0.5 * scale * scale)
    healthy = _loguniform(rng, *BASE_S) * wander * warm * evals * (1.0 + light) * jitter
    tl = _Timeline(iters=np.arange(1, n + 1, dtype=np.int64), healthy=healthy,
                   factor=(1.0 + rise)[None, :], pause=np.zeros(n),
                   protect=np.zeros(n, dtype=bool), events=[],
                   noise_scale=np.full(n, 1e-6))
    for a, b in events:  # labelled from the first rung, by the mean rise over the ladder
        _slowdown_label(tl, a, b, float(np.mean(rise[a:b])), "ladder")
    return tl


def _packed_cost(rng: np.random.Generator, bins: int, median: float, sigma: float,
                 attn: float) -> np.ndarray:
    """The compute cost of ``bins`` packed micro-batches (1 = the linear cost of a full one):
    sequences of log-normal lengths (in units of the maximum length, clipped at it) are
    packed one after another, a sequence that crosses a micro-batch's end is split, and a
    micro-batch costs ``1 + attn x sum(piece^2)`` (self-attention is quadratic)."""
    chunks, total = [], 0.0
    while total < bins:  # enough sequences for ``bins`` micro-batches (one or two draws)
        x = np.minimum(np.exp(math.log(median) + sigma * rng.standard_normal(
            int(bins / median / 2) + 1000)), 1.0)
        chunks.append(x)
        total += float(x.sum())
    x = np.concatenate(chunks)
    end = np.cumsum(x)
    k = int(np.searchsorted(end, bins)) + 1
    x, end = x[:k], end[:k]
    start = end - x
    b0 = np.floor(start).astype(np.int64)
    p1 = np.minimum(end, b0 + 1.0) - start
    p2 = np.maximum(end - (b0 + 1.0), 0.0)
    sq = (np.bincount(b0, p1 * p1, minlength=bins + 1)[:bins]
          + np.bincount(b0 + 1, p2 * p2, minlength=bins + 2)[:bins])
    return np.asarray(1.0 + attn * sq)


def _seqlen(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Variable-length long-context batches in synchronous data parallelism (module
    docstring): the step is the slowest rank's compute plus the all-reduce; the corpus' noise
    is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n, dtype=float)
    ranks = int(rng.choice(SL_RANKS))
    micro = _logint(rng, *SL_MICRO)
    median, sigma = _loguniform(rng, *SL_MEDIAN), float(rng.uniform(*SL_SIGMA))
    attn = _loguniform(rng, *SL_ATTN)
    cost = _packed_cost(rng, n * ranks * micro, median, sigma, attn)
    comp = cost.reshape(n, ranks, micro).sum(axis=2)  # (n, ranks): each rank's own batch
    kj = float(rng.uniform(*SL_KERNEL_JITTER))
    comp *= np.exp(kj * rng.standard_normal((n, ranks)))
    unit = float(comp.mean())  # the mean compute of a rank and step
    # unsynchronised Python GC: a pause stalls its rank, and the step waits for it
    gc_p = 1.0 / rng.uniform(*SL_GC_EVERY)
    hit = rng.random((n, ranks)) < gc_p
    comp[hit] += unit * _loguniforms(rng, *SL_GC_PAUSE, int(hit.sum()))
    cs, cj = float(rng.uniform(*SL_COMM_SHARE)), float(rng.uniform(*SL_COMM_JITTER))
    comm = cs * unit * np.exp(cj * rng.standard_normal(n) - 0.5 * cj * cj)
    fixed = float(rng.uniform(*SL_FIXED_SHARE)) * unit
    warm = 1.0 + rng.uniform(*SL_WARM_AMPLITUDE) * np.exp(-t / rng.uniform(*SL_WARM_TAU))
    warm[0] *= rng.uniform(*SL_FIRST)
    healthy_it = (comp.max(axis=1) + comm + fixed) * warm
    steady = healthy_it[LEAD_ITERS:]
    mean = float(steady.mean())
    cv = float(steady.std() / mean)
    it = healthy_it.copy()
    events: list[tuple[int, int, float, str]] = []
    if scenario == "slow":
        k = int(rng.integers(1, 4))
        part = (n - LEAD_ITERS) // k
        for j in range(k):  # one in each of k equal parts, 40 healthy iterations after it
            a0 = LEAD_ITERS + j * part
            s = float(rng.uniform(*SL_SLOWDOWN))
            need = math.ceil(SPAN_DECIDABLE * (cv / s) ** 2)
            dur = min(max(_logint(rng, *SL_SLOW_ITERS), need), part - 40)
            a = a0 + int(rng.integers(0, part - 40 - dur + 1))
            seg = slice(a, a + dur)
            target = (1.0 + s) * mean * dur  # the span's total time
            if rng.random() < SL_WORKER_P:
                # one rank's compute slower by u (a throttled GPU, a faulty host): the step
                # waits for it only where it is the slowest, so u is solved for the rise
                r = int(rng.integers(0, ranks))
                own = comp[seg, r]
                others = np.delete(comp[seg], r, axis=1).max(axis=1, initial=0.0)
                rest = (comm[seg] + fixed) * warm[seg]
                lo, hi = 0.0, SL_WORKER_MAX
                for _ in range(60):  # bisection: the span's time grows with u
                    u = 0.5 * (lo + hi)
                    tot = float(((np.maximum(others, own * (1.0 + u))) * warm[seg]
                                 + rest).sum())
                    lo, hi = (u, hi) if tot < target else (lo, u)
                u = 0.5 * (lo + hi)
                it[seg] = np.maximum(others, own * (1.0 + u)) * warm[seg] + rest
                kind = "worker"
            else:  # the gradient all-reduce slower (congestion on the data-parallel ring)
                extra = (target - float(healthy_it[seg].sum())) / float(
                    (comm[seg] * warm[seg]).sum())
                it[seg] += comm[seg] * warm[seg] * max(extra, 0.0)
                kind = "comm"
            events.append((a, a + dur, float(it[seg].mean() / mean - 1.0), kind))
    # labelled by the span's mean rise over the healthy mean
    return _quiet_timeline(_loguniform(rng, *BASE_S) * healthy_it, it / healthy_it, events)


def _accum(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Gradient accumulation logged per micro-batch (module docstring): only the boundary
    micro-batch of each optimizer step runs the all-reduce and the optimizer step; the
    corpus' noise is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n)
    k = int(rng.choice(AC_STEPS))
    # epochs: the accumulation counter restarts at each epoch's start, the epoch's last
    # micro-batch always closes a (possibly short) optimizer step
    lengths = rng.integers(AC_EPOCH[0], AC_EPOCH[1] + 1, n // AC_EPOCH[0] + 1)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    starts = starts[starts < n]
    ep = np.searchsorted(starts, t, side="right") - 1
    pos = t - starts[ep]
    last = np.zeros(n, dtype=bool)
    last[starts[1:] - 1] = True
    last[-1] = True
    bnd = ((pos + 1) % k == 0) | last
    nb = int(bnd.sum())
    # micro-batch compute: a slowly wandering rate and jitter, with the warm-up
    comp = _wandering_compute(rng, t, AC_WANDER_SD, AC_WANDER_PHI, AC_JITTER,
                              AC_WARM_AMPLITUDE, AC_WARM_TAU, AC_FIRST)
    # the boundary's work: the exposed all-reduce (jitter, transient congestion of one
    # boundary) and the optimizer step (on the GPU, or offloaded to the host)
    cj = float(rng.uniform(*AC_COMM_JITTER))
    comm = np.zeros(n)
    comm[bnd] = _loguniform(rng, *AC_COMM) * np.exp(cj * rng.standard_normal(nb) - 0.5 * cj * cj)
    burst_p = min(AC_BURST_P_MAX, k * float(rng.uniform(*AC_BURST_RATE)))
    hit = rng.random(nb) < burst_p
    bx = np.ones(nb)
    bx[hit] = _loguniforms(rng, *AC_BURST_X, int(hit.sum()))
    comm[bnd] *= bx
    offloaded = bool(rng.random() < AC_OFFLOAD_P)
    oj = float(rng.uniform(*AC_OPT_JITTER))
    opt = np.zeros(n)
    opt[bnd] = _loguniform(rng, *(AC_OFFLOAD_OPT if offloaded else AC_OPT)) * np.exp(
        oj * rng.standard_normal(nb) - 0.5 * oj * oj)
    # other healthy long iterations: data-loader restarts at epoch starts, validation passes
    other = np.zeros(n)
    other[starts[1:]] = _loguniforms(rng, *AC_EPOCH_STALL, starts.size - 1)
    every = int(rng.choice(AC_EVAL_EVERY))
    evals = np.flatnonzero(bnd)[every - 1::every]
    other[evals] += _loguniforms(rng, *AC_EVAL_X, evals.size)
    healthy_it = comp + comm + opt + other
    it = healthy_it.copy()
    events: list[tuple[int, int, float, str]] = []
    if scenario == "slow":
        ends = np.flatnonzero(bnd)  # a cycle ends at a boundary (inclusive)
        # the healthy spread of a cycle's time (bursts, jitter; validation passes and epoch
        # restarts left out): a slowdown lasts long enough for its rise to stand out
        cyc = np.add.reduceat(healthy_it, np.concatenate([[0], ends[:-1] + 1]))
        plain = np.add.reduceat(other, np.concatenate([[0], ends[:-1] + 1])) == 0
        steady = cyc[(ends >= LEAD_ITERS) & plain]
        cv = float(steady.std() / steady.mean())
        tail = slice(LEAD_ITERS, n)
        total = float(healthy_it[tail].sum())
        mean = total / (n - LEAD_ITERS)  # the healthy mean time after the warm-up
        cum = np.concatenate([[0.0], np.cumsum(healthy_it)])
        ne = int(rng.integers(1, 4))
        part = (n - LEAD_ITERS) // ne
        gap = max(40, 3 * k)  # healthy iterations after each slowdown
        for j in range(ne):  # one in each of ne equal parts, ``gap`` healthy ones after it
            a0, a1 = LEAD_ITERS + j * part, LEAD_ITERS + (j + 1) * part - gap
            # the kind and the rise: the all-reduce or the host optimizer step can only cause
            # a rise as large as their share of the time allows (at most AC_COMM_MAX /
            # AC_OFFLOAD_MAX times slower): the rise is drawn below that bound, and the kind
            # is compute where the bound is under AC_SLOWDOWN[0]
            u_draw = rng.random()
            kind = "comm" if u_draw < AC_COMM_P else (
                "offload" if u_draw < AC_COMM_P + AC_OFFLOAD_SLOW_P and offloaded else "compute")
            q = float(rng.uniform(*AC_COMM_HIT))
            sj = float(rng.uniform(*AC_COMM_SLOW_JITTER))
            v = float(rng.uniform(*AC_LAUNCH))
            if kind == "comm":
                top = (AC_COMM_MAX - 1.0) * q * float(comm[tail].sum()) / total
            elif kind == "offload":
                top = (v * float(comp[tail].sum())
                       + (AC_OFFLOAD_MAX - 1.0) * float(opt[tail].sum())) / total
            else:
                top = AC_SLOWDOWN[1]
            if top < AC_SLOWDOWN[0]:
                kind, top = "compute", AC_SLOWDOWN[1]
            s = float(rng.uniform(AC_SLOWDOWN[0], min(AC_SLOWDOWN[1], top)))
            # whole cycles (start after a boundary, end on one), long enough to be decided
            want = max(_logint(rng, *AC_SLOW_ITERS) / k, AC_MIN_CYCLES,
                       SPAN_DECIDABLE * (cv / s) ** 2)
            first = ends[(ends >= a0 - 1) & (ends < a1)]
            if first.size < AC_MIN_CYCLES + 1:
                continue
            cycles = min(math.ceil(want), first.size - 1)
            # a span whose healthy long iterations (validation, epoch restart) would make up
            # more than half of the rise is not taken: the slowdown makes most of it
            lo_, hi_ = first[:first.size - cycles] + 1, first[cycles:] + 1
            fits = np.flatnonzero(cum[hi_] - cum[lo_] <= (1.0 + s / 2.0) * mean * (hi_ - lo_))
            if fits.size == 0:
                continue
            i0 = int(rng.choice(fits))
            a, b = int(lo_[i0]), int(hi_[i0])
            seg = slice(a, b)
            # the span's extra time: its mean (1 + s) x the healthy mean
            need = (1.0 + s) * mean * (b - a) - float(healthy_it[seg].sum())
            if kind == "comm":  # congestion on the data-parallel ring: most boundaries,
                # each slower by a varying factor
                g = np.exp(sj * rng.standard_normal(b - a) - 0.5 * sj * sj)
                g *= (rng.random(b - a) < q) & bnd[seg]
                if not g.any():
                    g = bnd[seg].astype(float)
                w = comm[seg] * g
                extra = w * (need / float(w.sum()))
            elif kind == "offload":  # CPU contention: the host optimizer step, and a little
                # of every micro-batch's launch work
                launch = comp[seg] * v
                extra = launch + opt[seg] * ((need - float(launch.sum())) / float(opt[seg].sum()))
            else:  # a throttled GPU: every micro-batch's compute slower
                extra = comp[seg] * (need / float(comp[seg].sum()))
            it[seg] += extra
            events.append((a, b, float(it[seg].mean() / mean - 1.0), kind))
    # labelled by the span's mean rise over the healthy mean
    return _quiet_timeline(_loguniform(rng, *BASE_S) * healthy_it, it / healthy_it, events)


def _memory(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Memory pressure (module docstring): the caching allocator's sawtooth and Python's GC
    pauses on top of the compute; the corpus' noise is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n)
    ranks = int(rng.choice(NODE_RANKS))
    # compute: a slowly wandering rate and jitter, with the warm-up
    comp = _wandering_compute(rng, t, *NODE_COMPUTE)
    # the caching allocator: fragmentation grows until the cache is full (the compute slower
    # by up to ``amp``: cudaMalloc / cudaFree calls), then the cache is freed and refilled
    period = _loguniform(rng, *MP_TOOTH)
    lengths = np.maximum(2, np.round(period * rng.uniform(1.0 - MP_TOOTH_SPREAD,
                                                          1.0 + MP_TOOTH_SPREAD,
                                                          n // 2 + 1))).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    starts = starts[starts < n]
    tooth = np.searchsorted(starts, t, side="right") - 1
    frac = (t - starts[tooth] + 1) / lengths[tooth]
    amp = float(rng.uniform(*MP_FRAG_AMP))
    flush_cost = _loguniform(rng, *MP_FLUSH)
    flush = np.where(frac >= 1.0, flush_cost, 0.0)
    alloc = comp * amp * frac + flush
    # Python's GC: a full collection pauses its rank (and so the step) for a time that grows
    # with the heap; automatic (each rank on its own) or planned (every rank at once)
    pause = _loguniform(rng, *MP_GC_PAUSE)
    planned = bool(rng.random() < MP_PLANNED_P)
    heap = np.ones(n)
    if planned:
        every = int(rng.choice(MP_PLANNED_EVERY))
        hit = (t + 1) % every == 0
        gc = np.where(hit, pause * np.exp(MP_GC_JITTER * rng.standard_normal(n)), 0.0)
        heap += rng.uniform(*MP_MASKED) * t / n  # masked by the planned GC: not an event
    else:
        p = float(rng.uniform(*MP_GC_RATE))
        pr = np.where(rng.random((n, ranks)) < p,
                      pause * np.exp(MP_GC_JITTER * rng.standard_normal((n, ranks))), 0.0)
        gc = pr.max(axis=1)  # the step waits for the longest pause
    healthy_it = comp + alloc + gc * heap
    it = healthy_it.copy()
    events: list[tuple[int, int, float, str]] = []
    if scenario == "slow":
        steady = healthy_it[LEAD_ITERS:]
        mean = float(steady.mean())
        cv = float(steady.std() / mean)
        ne = int(rng.integers(1, 4))
        part = (n - LEAD_ITERS) // ne
        for j in range(ne):  # one in each of ne equal parts, 40 healthy iterations after it
            a0 = LEAD_ITERS + j * part
            s = float(rng.uniform(*NODE_SLOWDOWN))
            kind = "frag" if planned or rng.random() < MP_FRAG_P else "leak"
            need_iters = math.ceil(SPAN_DECIDABLE * (cv / s) ** 2)
            dur = min(max(_logint(rng, *NODE_SLOW_ITERS), need_iters), part - 40)
            if dur < max(MIN_EVENT_ITERS, NODE_SLOW_ITERS[0]):
                continue
            a = a0 + int(rng.integers(0, part - 40 - dur + 1))
            b = a + dur
            seg = slice(a, b)
            target = (1.0 + s) * mean * dur  # the span's total time
            u = t[seg] - a
            if kind == "frag":
                # allocator thrash (a changed allocation pattern, or GPU tensors kept alive):
                # the cache fills m times sooner and every tooth climbs higher; the flushes
                # make at most half of the rise
                m = float(rng.uniform(*MP_THRASH))
                m = max(1.0, min(m, s * period / (2.0 * flush_cost)))
                ts_ = max(MP_MIN_TOOTH, int(round(period / m)))
                ts_ = min(ts_, dur // MP_MIN_TEETH)
                fr = (u % ts_ + 1) / ts_
                fl = np.where(u % ts_ == ts_ - 1, flush_cost, 0.0)
                rest = comp[seg] + fl + gc[seg] * heap[seg]
                big = (target - float(rest.sum())) / float((comp[seg] * fr).sum())
                if big > amp and (float(fl.sum() - flush[seg].sum())
                                  <= 0.5 * (target - float(healthy_it[seg].sum()))):
                    it[seg] = rest + comp[seg] * big * fr
                else:  # a thrash made mostly of flushes: a leak instead
                    kind = "leak"
            if kind == "leak":
                # a host memory leak (tensors or outputs kept in a list): the heap grows
                # linearly, every GC pause with it, and every iteration a little slower;
                # freed at the span's end (the list is cleared)
                w = float(rng.uniform(*MP_LEAK_STEP))
                per = u * (comp[seg] * w + gc[seg])
                g = (target - float(healthy_it[seg].sum())) / float(per.sum())
                if g <= 0.0:
                    continue
                it[seg] = healthy_it[seg] + g * per
            events.append((a, b, float(it[seg].mean() / mean - 1.0), kind))
    # labelled by the span's mean rise over the healthy mean
    return _quiet_timeline(_loguniform(rng, *BASE_S) * healthy_it, it / healthy_it, events)



def _clip_scan(a: np.ndarray, lo: np.ndarray, hi: np.ndarray, x0: float) -> np.ndarray:
    """``x[j] = clip(x[j-1] + a[j], lo[j], hi[j])`` from ``x[-1] = x0``, as a scan along the
    last axis (each row its own): maps of the form ``x -> clip(x + a, lo, hi)`` (``lo <=
    hi``) are closed under composition, so the prefix compositions are built in ``log2(n)``
    vectorised rounds (Hillis-Steele)."""
    a, lo, hi = a.astype(float), lo.astype(float), hi.astype(float)
    shift = 1
    while shift < a.shape[-1]:
        # later (j) after earlier (j - shift): x -> clip(x + a_e + a_l, clip(lo_e + a_l, lo_l,
        # hi_l), clip(hi_e + a_l, lo_l, hi_l))
        ae, le, he = a[..., :-shift], lo[..., :-shift], hi[..., :-shift]
        al, ll, hl = a[..., shift:], lo[..., shift:], hi[..., shift:]
        new_lo = np.clip(le + al, ll, hl)
        new_hi = np.clip(he + al, ll, hl)
        a = np.concatenate([a[..., :shift], ae + al], axis=-1)
        lo = np.concatenate([lo[..., :shift], new_lo], axis=-1)
        hi = np.concatenate([hi[..., :shift], new_hi], axis=-1)
        shift *= 2
    return np.clip(x0 + a, lo, hi)


@dataclass(frozen=True)
class _Loader:
    """The input pipeline of a :func:`_prefetch` series: per-batch production times of the
    loader (``prod``, the worker pool's interval between two ready batches), the prefetch
    queue's depth (batches) and where the workers restart (epoch starts, with their startup
    time; 0 where they persist)."""

    depth: float
    restart: np.ndarray  # (n,) bool: the queue is empty at this step's start
    startup: np.ndarray  # (n,) the workers' startup wait at a restart


def _steps(comp: np.ndarray, prod: np.ndarray, ld: _Loader) -> np.ndarray:
    """Step times of a trainer that computes ``comp`` per step and takes each batch from the
    prefetch queue (a fluid model: the loader adds ``1 / prod`` batches per unit of time, at
    most ``depth`` wait, every step takes one and waits for it when the queue is empty)."""
    d = comp / prod - 1.0  # the queue's change over a step that does not wait
    a = np.where(ld.restart, 0.0, d)
    hi = np.where(ld.restart, 0.0, ld.depth)
    q = _clip_scan(a, np.zeros(d.size), hi, 0.0)  # the queue after each step
    before = np.concatenate([[0.0], q[:-1]])
    wait = prod * np.maximum(0.0, -(before + d))
    wait = np.where(ld.restart, ld.startup + prod, wait)
    return comp + wait


def _hiccups(u: np.ndarray, r: np.ndarray, x: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The production times' factor of storage hiccups: one starts at batch ``j`` where
    ``u[j] < r[j]`` and makes ``length[j]`` batches ``x[j]`` times slower (a later start takes
    over)."""
    t = np.arange(u.size)
    owner = np.maximum.accumulate(np.where(u < r, t, -1))
    own = np.maximum(owner, 0)
    live = (owner >= 0) & (t < own + length[own])
    return np.where(live, x[own], 1.0)


@dataclass(frozen=True)
class _Storage:
    """The draws of a :func:`_prefetch` series' loader (one entry per batch): production
    times without hiccups (``base``), the hiccups' draws and the storms' heights."""

    base: np.ndarray
    u: np.ndarray
    rate: np.ndarray
    x: np.ndarray
    length: np.ndarray
    storm_x: np.ndarray

    def prod(self, slow: tuple[tuple[int, int, str, float], ...] = ()) -> np.ndarray:
        """Production times, with slowdowns ``(a, b, kind, g)`` of ``kind`` and size ``g``
        over ``[a, b)``: ``storage`` (every read ``g`` times slower: a congested storage
        network, or the workers' CPU contended) or ``storm`` (hiccups start with chance ``g``
        per batch: the shared filesystem's metadata server overloaded)."""
        base, rate, x = self.base.copy(), self.rate.copy(), self.x.copy()
        for a, b, kind, g in slow:
            if kind == "storage":
                base[a:b] *= g
            else:
                rate[a:b] = np.maximum(rate[a:b], g)
                x[a:b] = np.maximum(x[a:b], self.storm_x[a:b])  # never a healthy one shorter
        return np.asarray(base * _hiccups(self.u, rate, x, self.length))


def _prefetch(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Input-pipeline stalls behind a prefetch queue (module docstring); the corpus' noise is
    turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n)
    # compute: a slowly wandering rate and jitter, with the warm-up
    comp = _wandering_compute(rng, t, *NODE_COMPUTE)
    # the loader: the worker pool's interval between two ready batches, a utilisation rho of
    # the trainer's rate, log-normal read times (mean kept) and storage hiccups
    rho = float(rng.uniform(*DL_RHO))
    sig = float(rng.uniform(*DL_READ_SIGMA))
    base = rho * np.exp(sig * rng.standard_normal(n) - 0.5 * sig * sig)
    # epochs: non-persistent workers restart at each epoch's start (the queue empty, the
    # workers' startup waited for); the job's start is one
    restart = t % _logint(rng, *DL_EPOCH) == 0
    if rng.random() < DL_PERSISTENT_P:
        restart[1:] = False
    startup = np.where(restart, rng.uniform(*DL_STARTUP) * float(comp[LEAD_ITERS:].mean()),
                       0.0)
    ld = _Loader(depth=float(rng.choice(DL_DEPTH)), restart=restart, startup=startup)
    # hidden storage slowdowns: every read slower, the loader still ahead of the trainer
    # (utilisation at most DL_HIDDEN_MAX): the queue hides them, never an event
    k = int(rng.integers(1, 4))
    part = (n - LEAD_ITERS) // k
    kinds = ["storage" if rng.random() < DL_STORAGE_P else "storm" for _ in range(k)]
    plan = [scenario == "slow" and (j == 0 or rng.random() < SPAN_MORE_P) for j in range(k)]
    for j in range(k):
        if plan[j] or rng.random() >= DL_HIDDEN_P:
            continue
        dur = min(_logint(rng, *DL_HIDDEN_ITERS), part - 40)
        a = LEAD_ITERS + j * part + int(rng.integers(0, part - 40 - dur + 1))
        base[a:a + dur] *= rng.uniform(1.0, max(1.0, DL_HIDDEN_MAX / rho))
    st = _Storage(
        base=base, u=rng.random(n), rate=np.full(n, float(rng.uniform(*DL_HICCUP_RATE))),
        x=_loguniforms(rng, *DL_HICCUP_X, n),
        length=rng.integers(DL_HICCUP_LEN[0], DL_HICCUP_LEN[1] + 1, n),
        storm_x=_loguniforms(rng, *DL_STORM_X, n))
    healthy_it = _steps(comp, st.prod(), ld)
    steady = healthy_it[LEAD_ITERS:]
    mean = float(steady.mean())
    cv = float(steady.std() / mean)
    it = healthy_it.copy()
    slow: tuple[tuple[int, int, str, float], ...] = ()
    events: list[tuple[int, int, float, str]] = []
    for j in range(k):  # one in each of k equal parts, 40 healthy iterations after it
        for _ in range(SPAN_TRIES if plan[j] else 0):  # fresh draws until one is decidable
            s = float(rng.uniform(*NODE_SLOWDOWN))
            # the visible span's length; a slower storage first drains the queue (at
            # 1 - 1/(1 + s) batches a step), so its span is longer by that much
            dur = max(_logint(rng, *NODE_SLOW_ITERS), math.ceil(SPAN_DECIDABLE * (cv / s) ** 2))
            if kinds[j] == "storm":  # a storm's steps are far wider than the healthy ones
                dur = max(dur, math.ceil(DL_STORM_WIDE * SPAN_DECIDABLE * (cv / s) ** 2))
            else:
                dur += math.ceil(ld.depth * (1.0 + s) / s)
            dur = min(dur, part - 40 - DL_TAIL)
            a = LEAD_ITERS + j * part + int(rng.integers(0, max(1, part - 40 - DL_TAIL - dur
                                                                   + 1)))
            found = _dl_slowdown(st, comp, ld, it, mean, slow, (a, a + dur, kinds[j]), s)
            if found is None:
                continue
            lo, hi, y, g = found
            seg = y[lo:hi]
            r = float(seg.mean() / mean - 1.0)
            # decidable: the rise is SPAN_DECIDABLE standard errors of the span's mean, its
            # noise from one step to the next (winsorised at the 98th percentile: a hiccup's
            # or a restart's single wait)
            w = np.minimum(seg, np.percentile(seg, 98))
            noise = float(np.diff(w).std()) / math.sqrt(2.0) / mean
            if (hi <= a + dur + DL_TAIL and r >= NODE_SLOWDOWN[0] and hi - lo >= NODE_SLOW_ITERS[0]
                    and hi - lo >= SPAN_DECIDABLE * (noise / r) ** 2):
                it = y
                slow += ((a, a + dur, kinds[j], g),)
                events.append((lo, hi, r, kinds[j]))
                break
    # labelled by the span's mean rise over the healthy mean
    return _quiet_timeline(_loguniform(rng, *BASE_S) * healthy_it, it / healthy_it, events)


def _dl_slowdown(st: _Storage, comp: np.ndarray, ld: _Loader, it: np.ndarray, mean: float,
                 slow: tuple[tuple[int, int, str, float], ...], where: tuple[int, int, str],
                 s: float) -> tuple[int, int, np.ndarray, float] | None:
    """A slowdown of the loader over ``where`` = ``(a, b, kind)`` (on top of ``slow``) whose
    visible span (where the step times differ from ``it``: after the queue has drained,
    until it has refilled) rises by about ``s`` over ``mean``, its size ``g`` solved by
    bisection: ``(start, end, step times, g)``, or None where none does."""
    a, b, kind = where

    def trial(g: float) -> tuple[int, int, np.ndarray]:
        y = _steps(comp, st.prod(slow + ((a, b, kind, g),)), ld)
        return _changed_span(y, it, a, y.size)

    lo, hi = (1.0, DL_STORAGE_MAX / float(st.base[a:b].mean())) if kind == "storage" else (
        0.0, DL_STORM_MAX)
    return _solve_rise(trial, mean, s, lo, hi)


def _gpipe(f: np.ndarray, b: np.ndarray, cf: np.ndarray, cb: np.ndarray,
           ar: np.ndarray) -> np.ndarray:
    """Iteration times of a GPipe schedule, one iteration per row: ``f`` / ``b`` ``(n, p,
    m)`` the forward / backward time of each stage and micro-batch, ``cf`` / ``cb`` ``(n, p -
    1, m)`` the transfer of activations (stage ``l`` to ``l + 1``) and of gradients (back) on
    link ``l``, ``ar`` ``(n, p)`` each stage's exposed all-reduce after its last backward.
    Every stage runs its micro-batches in order (the backwards in reverse order, after the
    last stage's last forward); a micro-batch starts when its input has arrived and the
    stage is free: ``x[j] = max(ready[j], x[j - 1]) + w[j]``, a max-plus scan along the
    micro-batches, ``x = C + cummax(ready - C_prev)`` (C the cumulative work).  Micro-batches
    of zero work at the start of the order are padding (they cost nothing)."""
    n, p, m = f.shape
    zero = np.zeros((n, 1))

    def scan(ready: np.ndarray, w: np.ndarray) -> np.ndarray:
        c = np.cumsum(w, axis=1)
        prev = np.concatenate([zero, c[:, :-1]], axis=1)
        return np.asarray(c + np.maximum.accumulate(ready - prev, axis=1))

    x = scan(np.zeros((n, m)), f[:, 0])
    for s in range(1, p):  # the stages (a handful), vectorised over iterations
        x = scan(x + cf[:, s - 1], f[:, s])
    fend = np.broadcast_to(x[:, -1:], (n, m))
    end = np.empty((n, p))
    y = scan(np.asarray(fend), b[:, p - 1, ::-1])
    end[:, p - 1] = y[:, -1]
    for s in range(p - 2, -1, -1):
        y = scan(y + cb[:, s, ::-1], b[:, s, ::-1])
        end[:, s] = y[:, -1]
    return np.asarray((end + ar).max(axis=1))


@dataclass(frozen=True)
class _Pipe:
    """The draws of a :func:`_pipeline` series (arrays of :func:`_gpipe`, one row per
    iteration) and the per-transfer spread of a congested link."""

    f: np.ndarray
    b: np.ndarray
    cf: np.ndarray
    cb: np.ndarray
    ar: np.ndarray
    link_jit: np.ndarray  # (n, p - 1, m) unit-mean log-normal factors

    def times(self, lo: int, hi: int,
              slow: tuple[tuple[int, int, str, int, float], ...] = ()) -> np.ndarray:
        """Iteration times of rows ``[lo, hi)`` with slowdowns ``(a, b, kind, where, g)``:
        ``stage`` (stage ``where``'s compute ``g`` times slower) or ``link`` (the transfers
        on link ``where``, both ways, ``g`` times slower on average)."""
        f, b = self.f[lo:hi].copy(), self.b[lo:hi].copy()
        cf, cb = self.cf[lo:hi].copy(), self.cb[lo:hi].copy()
        for a, e, kind, w, g in slow:
            i0, i1 = max(a, lo) - lo, min(e, hi) - lo
            if i1 <= i0:
                continue
            if kind == "stage":
                f[i0:i1, w] *= g
                b[i0:i1, w] *= g
            else:
                x = g * self.link_jit[lo + i0:lo + i1, w]
                cf[i0:i1, w] *= x
                cb[i0:i1, w] *= x
        return _gpipe(f, b, cf, cb, self.ar[lo:hi])


def _pipeline(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Pipeline-parallel training (module docstring); the corpus' noise is turned off
    (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n)
    p = int(rng.choice(PP_STAGES))
    m0 = int(rng.choice([m for m in PP_MICRO if p <= m <= PP_MICRO_START * p]))
    k = int(rng.integers(1, 4))
    part = (n - LEAD_ITERS) // k
    # a micro-batch schedule change (the global batch kept): more micro-batches shrink the
    # bubble, (m + p - 1) micro-batch times of o + (1 - o) m0 / m each; only to an m whose
    # level lies in PP_CHANGE_RATIO of the old one
    o = float(rng.uniform(*PP_OVERHEAD))
    work = {m: o + (1.0 - o) * m0 / m for m in PP_MICRO if m >= p}
    m_at = np.full(n, m0)
    change = -1
    if rng.random() < PP_CHANGE_P:
        level = {m: (m + p - 1) * work[m] / (m0 + p - 1) for m in work if m != m0}
        ok = [m for m, r in level.items() if PP_CHANGE_RATIO[0] <= r <= PP_CHANGE_RATIO[1]]
        faster = [m for m in ok if level[m] <= PP_CHANGE_FASTER]
        if faster and rng.random() < PP_CHANGE_FASTER_P:  # mostly a change worth making
            ok = faster
        jc = int(rng.integers(0, k))
        if ok:
            change = LEAD_ITERS + jc * part + int(rng.integers(0, 50))
            m_at[change:] = int(rng.choice(ok))
    mm = int(m_at.max())
    pad = np.arange(mm)[None, :] < (mm - m_at)[:, None]  # (n, mm): padding first
    wmb = np.array([work[int(m)] for m in (m0, m_at[-1])])[(m_at != m0).astype(np.int64)]
    # compute: stage imbalance (first and last heavier: embedding, loss head), each stage's
    # rate wandering slowly, jitter per stage, micro-batch and pass, the warm-up
    imb = float(rng.uniform(*PP_IMBALANCE))
    u = rng.uniform(0.0, 1.0, p)
    u[[0, -1]] = rng.uniform(0.5, 1.0, 2)
    weight = 1.0 + imb * u
    sd, phi = float(rng.uniform(*PP_WANDER_SD)), float(rng.uniform(*PP_WANDER_PHI))
    wander = lfilter([sd * math.sqrt(1.0 - phi * phi)], [1.0, -phi],
                     rng.standard_normal((p, n)), axis=1).T  # (n, p)
    warm = 1.0 + rng.uniform(*PP_WARM_AMPLITUDE) * np.exp(-t / rng.uniform(*PP_WARM_TAU))
    warm[0] *= rng.uniform(*PP_FIRST)
    rate = (np.exp(wander) * weight[None, :] * warm[:, None] * wmb[:, None])[:, :, None]
    jit = float(rng.uniform(*PP_JITTER))
    bwd = float(rng.uniform(*PP_BACKWARD))
    live = ~pad[:, None, :]

    def lognorm(sig: float, shape: tuple[int, ...]) -> np.ndarray:
        return np.asarray(np.exp(sig * rng.standard_normal(shape) - 0.5 * sig * sig))

    f = rate * lognorm(jit, (n, p, mm)) * live
    b = bwd * rate * lognorm(jit, (n, p, mm)) * live
    # transfers between stages, with hiccups (one transfer far slower)
    c0, cj = float(rng.uniform(*PP_P2P)), float(rng.uniform(*PP_P2P_JITTER))
    lk = (p - 1, mm)
    cf = c0 * wmb[:, None, None] * lognorm(cj, (n, *lk)) * live
    cb = c0 * wmb[:, None, None] * lognorm(cj, (n, *lk)) * live
    hic = rng.random(n) < rng.uniform(*PP_HICCUP_RATE)
    hx = _loguniforms(rng, *PP_HICCUP_X, n)
    hl = rng.integers(0, max(1, p - 1), n)
    hj = mm - 1 - rng.integers(0, m_at)  # a real micro-batch
    rows = np.flatnonzero(hic & (p > 1))
    cf[rows, hl[rows], hj[rows]] *= hx[rows]
    # each stage's exposed all-reduce (its share of the mean iteration, the first m's)
    t0 = (m0 + p - 1) * (1.0 + bwd) * float(weight.max())
    ar = float(rng.uniform(*PP_AR)) * t0 * lognorm(float(rng.uniform(*PP_AR_JITTER)), (n, p))
    pipe = _Pipe(f=f, b=b, cf=cf, cb=cb, ar=ar,
                 link_jit=lognorm(float(rng.uniform(*PP_LINK_JITTER)), (n, *lk)))
    plain = pipe.times(0, n)
    # where each part's slowdown may lie: after the part's start (a schedule change) has
    # settled, SPAN_CLEAR iterations before the next part's start
    starts = [LEAD_ITERS + j * part for j in range(k)]
    plan = [scenario == "slow" and (j == 0 or rng.random() < SPAN_MORE_P) for j in range(k)]
    # hidden slowdowns (healthy): a stage with slack to the slowest one slower by part of that
    # slack; the pipeline's bottleneck is elsewhere, the iteration hardly slower
    hidden: tuple[tuple[int, int, str, int, float], ...] = ()
    for j in range(k):
        if plan[j] or rng.random() >= PP_HIDDEN_P or p < 2:
            continue
        s_h = int(rng.integers(0, p))
        slack = float(weight.max() / weight[s_h])
        g = 1.0 + rng.uniform(*PP_HIDDEN_SLACK) * (slack - 1.0)
        dur = min(_logint(rng, *PP_HIDDEN_ITERS), part - PP_SETTLE - SPAN_CLEAR)
        a = starts[j] + PP_SETTLE + int(rng.integers(0, part - PP_SETTLE - SPAN_CLEAR - dur + 1))
        trial = pipe.times(a, a + dur, ((a, a + dur, "stage", s_h, g),))
        if g > 1.0 and trial.mean() < (1.0 + PP_HIDDEN_RISE) * plain[a:a + dur].mean():
            hidden += ((a, a + dur, "stage", s_h, g),)
    healthy_it = plain.copy()
    for a, e, *_ in hidden:
        healthy_it[a:e] = pipe.times(a, e, hidden)
    steady = healthy_it[LEAD_ITERS:]
    cv = float(steady.std() / steady.mean())
    it = healthy_it.copy()
    events: list[tuple[int, int, float, str]] = []
    for j in range(k):  # one in each of k parts
        if not plan[j]:
            continue
        s = float(rng.uniform(*PP_SLOWDOWN))
        kind = "stage" if rng.random() < PP_STAGE_P or p < 2 else "link"
        room = part - PP_SETTLE - SPAN_CLEAR
        dur = min(max(_logint(rng, *PP_SLOW_ITERS), math.ceil(SPAN_DECIDABLE * (cv / s) ** 2)),
                  room)
        if dur < PP_SLOW_ITERS[0]:
            continue
        a = starts[j] + PP_SETTLE + int(rng.integers(0, room - dur + 1))
        where = int(rng.integers(0, p)) if kind == "stage" else int(rng.integers(0, p - 1))
        base = float(healthy_it[a:a + dur].mean())

        def rise(g: float, kind: str = kind, where: int = where, a: int = a,
                 dur: int = dur, base: float = base) -> float:
            y = pipe.times(a, a + dur, hidden + ((a, a + dur, kind, where, g),))
            return float(y.mean() / base - 1.0)

        top = PP_STAGE_MAX if kind == "stage" else PP_LINK_MAX
        if rise(top) < s and kind == "link":  # a link too fast to matter: a stage instead
            kind, where, top = "stage", int(rng.integers(0, p)), PP_STAGE_MAX
        if rise(top, kind, where) < s:
            continue
        lo_g, hi_g = 1.0, top
        for _ in range(40):  # bisection: the span's rise grows with g
            mid = 0.5 * (lo_g + hi_g)
            lo_g, hi_g = (mid, hi_g) if rise(mid, kind, where) < s else (lo_g, mid)
        y = pipe.times(a, a + dur, hidden + ((a, a + dur, kind, where, hi_g),))
        it[a:a + dur] = y
        events.append((a, a + dur, float(y.mean() / base - 1.0), kind))
    # labelled by the span's mean rise over its healthy mean
    return _quiet_timeline(_loguniform(rng, *BASE_S) * healthy_it / float(steady.mean()),
                           it / healthy_it, events)


@dataclass(frozen=True)
class _Fabric:
    """The draws of a :func:`_lossy_link` series' fabric (one entry per iteration): the
    healthy chance of a loss (wandering, blips included), the uniform draws that decide a loss
    and a flap, and the time each costs (mean iterations)."""

    rate: np.ndarray
    u: np.ndarray
    cost: np.ndarray  # a loss: go-back-N (the collectives longer) or a timeout with backoff
    u_flap: np.ndarray
    down: np.ndarray  # a flap: the interface down, every packet in flight dropped

    def lost(self, slow: tuple[tuple[int, int, str, float, int, float], ...] = ()
             ) -> np.ndarray:
        """The time lost per iteration, with degraded links ``(a, b, kind, g, ramp, shift)``
        over ``[a, b)``: the chance of a loss (``lossy``, ``downshift``) or of a flap
        (``flap``) climbs linearly from the healthy chance at ``a`` to ``g`` over ``ramp``
        iterations (1: a step), and ``downshift`` adds ``shift`` to every iteration (the link
        trained down to a lower rate)."""
        p, pf = self.rate.copy(), np.zeros(self.rate.size)
        extra = np.zeros(self.rate.size)
        for a, b, kind, g, ramp, shift in slow:
            r = np.minimum(1.0, (np.arange(b - a) + 1.0) / ramp)
            lo = min(g, float(self.rate[a]))
            q = lo + (g - lo) * r
            if kind == "flap":
                pf[a:b] = q
            else:
                p[a:b] = np.maximum(p[a:b], q)
                extra[a:b] += shift
        return np.asarray(extra + np.where(self.u < p, self.cost, 0.0)
                          + np.where(self.u_flap < pf, self.down, 0.0))


def _lossy_link(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Packet loss and interface flapping on the training fabric (module docstring); the
    corpus' noise is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n)
    # compute (a slowly wandering rate, jitter, the warm-up) and the exposed collectives
    comp = _wandering_compute(rng, t, *NODE_COMPUTE)
    c = float(rng.uniform(*LL_COMM))
    cj = float(rng.uniform(*LL_COMM_JITTER))
    base_it = (1.0 - c) * comp + c * np.exp(cj * rng.standard_normal(n) - 0.5 * cj * cj)
    # checkpoints (1-3 iterations slower) and evaluations (one iteration longer)
    every = int(rng.integers(NODE_CKPT_EVERY[0], NODE_CKPT_EVERY[1] + 1))
    ck = t // every
    ck_len = rng.integers(NODE_CKPT_ITERS[0], NODE_CKPT_ITERS[1] + 1, int(ck[-1]) + 1)
    ck_x = _loguniforms(rng, *NODE_CKPT_X, ck_len.size)
    work = np.where((ck > 0) & (t % every < ck_len[ck]), (ck_x[ck] - 1.0) * base_it, 0.0)
    ev = int(rng.choice(NODE_EVAL_EVERY))
    at = t % ev == ev - 1
    work[at] += _loguniforms(rng, *NODE_EVAL_X, int(at.sum()))
    base_it = base_it + work
    # a loss costs a go-back-N retransmission (the collectives longer) or, for a tail loss, a
    # timeout doubled at each retry
    fast = c * _loguniforms(rng, *LL_FAST, n)
    tail = rng.random(n) < rng.uniform(*LL_TAIL_P)
    retries = np.minimum(rng.geometric(1.0 - LL_BACKOFF_P, n), LL_RETRIES)
    cost = np.where(tail, _loguniform(rng, *LL_RTO) * (2.0 ** retries - 1.0), fast)
    # the healthy fabric: rare losses (their time a share LL_HEALTHY_LOSS of an iteration),
    # the chance wandering slowly, and short blips
    p0 = float(rng.uniform(*LL_HEALTHY_LOSS)) / float(cost.mean())
    phi = float(rng.uniform(*LL_RATE_PHI))
    w = lfilter([LL_RATE_SD * math.sqrt(1.0 - phi * phi)], [1.0, -phi], rng.standard_normal(n))
    rate = p0 * np.exp(LL_RATE_BOUND * np.tanh(w / LL_RATE_BOUND))
    blip = _hiccups(rng.random(n), np.full(n, float(rng.uniform(*LL_BLIP_RATE))),
                    1.0 + rng.uniform(*LL_BLIP_P, n),
                    rng.integers(LL_BLIP_ITERS[0], LL_BLIP_ITERS[1] + 1, n)) - 1.0
    fab = _Fabric(rate=np.maximum(rate, blip), u=rng.random(n), cost=cost,
                  u_flap=rng.random(n),
                  down=_loguniforms(rng, *LL_FLAP_DOWN, n))
    healthy_it = base_it + fab.lost()
    steady = healthy_it[LEAD_ITERS:]
    mean = float(steady.mean())
    var = float(steady.var()) / mean ** 2
    # each kind's spread per unit of rise (a loss's or a flap's E[x^2] / E[x], over the mean)
    spread = {"lossy": float((cost ** 2).mean() / cost.mean()) / mean,
              "flap": float((fab.down ** 2).mean() / fab.down.mean()) / mean}
    spread["downshift"] = spread["lossy"]
    top_loss = 0.8 * LL_RATE_MAX * float(cost.mean()) / mean
    k = int(rng.integers(1, 4))
    part = (n - LEAD_ITERS) // k
    it = healthy_it.copy()
    slow: tuple[tuple[int, int, str, float, int, float], ...] = ()
    events: list[tuple[int, int, float, str]] = []
    for j in range(k):  # one in each of k equal parts, 40 healthy iterations after it
        if scenario != "slow" or (j > 0 and rng.random() >= SPAN_MORE_P):
            continue
        for attempt in range(SPAN_TRIES):  # fresh draws until one is decidable
            u_kind = rng.random()
            kind = "flap" if u_kind < LL_FLAP_P else (
                "downshift" if u_kind < LL_FLAP_P + LL_DOWNSHIFT_P else "lossy")
            # losses can only raise the mean as far as their cost allows (a chance of at most
            # LL_RATE_MAX): the rise is drawn below that, and the link flaps where it is
            # under NODE_SLOWDOWN[0] (short collectives, rare timeouts)
            top = NODE_SLOWDOWN[1] if kind == "flap" else top_loss
            if top < NODE_SLOWDOWN[0]:
                kind, top = "flap", NODE_SLOWDOWN[1]
            s = float(rng.uniform(NODE_SLOWDOWN[0], min(NODE_SLOWDOWN[1], top)))
            ramp_share = float(rng.uniform(*LL_RAMP)) if rng.random() < LL_RAMP_P else 0.0
            # long enough for the rise to be five standard errors of the span's mean (the
            # span's spread about var + s x spread, with a margin), longer by what a climb
            # loses
            need = SPAN_NEED_MARGIN * SPAN_DECIDABLE * (var + s * spread[kind]) / s ** 2
            dur = max(_logint(rng, *NODE_SLOW_ITERS), math.ceil(need))
            dur += min(LL_RAMP_MAX, math.ceil(ramp_share * dur)) // 2
            shift = min(c * float(rng.uniform(*LL_SHIFT)), s * LL_SHIFT_MAX)
            if j == 0 and attempt == SPAN_TRIES - 1:  # the last try of a positive's first part:
                kind, ramp_share, dur = "flap", 0.0, part  # its largest room, a step
            dur = min(dur, part - 40)
            a = LEAD_ITERS + j * part + int(rng.integers(0, part - 40 - dur + 1))
            ramp = max(1, min(LL_RAMP_MAX, int(round(ramp_share * dur))))
            sh = shift if kind == "downshift" else 0.0
            found = _ll_degrade(fab, base_it, it, mean, slow, (a, a + dur, kind, ramp, sh), s)
            if found is None:
                continue
            lo, hi, y, g = found
            r = _decidable_rise(y, lo, hi, mean, NODE_SLOWDOWN[0], s + SPAN_OVERSHOOT,
                                NODE_SLOW_ITERS[0], SPAN_DECIDABLE)
            if r is not None:
                it = y
                slow += ((a, a + dur, kind, g, ramp, sh),)
                events.append((lo, hi, r, kind))
                break
    # labelled by the span's mean rise over the healthy mean
    return _quiet_timeline(_loguniform(rng, *BASE_S) * healthy_it / mean, it / healthy_it,
                           events)


def _ll_degrade(fab: _Fabric, base_it: np.ndarray, it: np.ndarray, mean: float,
                slow: tuple[tuple[int, int, str, float, int, float], ...],
                where: tuple[int, int, str, int, float], s: float
                ) -> tuple[int, int, np.ndarray, float] | None:
    """A degraded link over ``where`` = ``(a, b, kind, ramp, shift)`` (on top of ``slow``)
    whose span (from the first iteration it slows to the last) rises by about ``s`` over
    ``mean``, its chance ``g`` solved by bisection: ``(start, end, iteration times, g)``, or
    None where none does."""
    a, b, kind, ramp, sh = where

    def trial(g: float) -> tuple[int, int, np.ndarray]:
        y = base_it + fab.lost(slow + ((a, b, kind, g, ramp, sh),))
        return _changed_span(y, it, a, b)

    return _solve_rise(trial, mean, s, 0.0, LL_FLAP_MAX if kind == "flap" else LL_RATE_MAX)


@dataclass(frozen=True)
class _Hosts:
    """The draws of a :func:`_gc_pause` series (arrays ``(ranks, n)`` or ``(n,)``): each rank's
    device and host time per step, its heap (base 1, growing over an epoch), the survivors
    each step adds (in shares of a collection's threshold at the base heap), the uniform
    phase of its collection clock, the pause of a collection of the base heap, the young
    collections' host time, and the step's exposed all-reduce and extra work (checkpoints,
    evaluations)."""

    dev: np.ndarray
    host: np.ndarray
    heap: np.ndarray
    alloc: np.ndarray
    phase: np.ndarray
    pause: np.ndarray
    young: float
    manual: int  # planned GC every this many steps (0: automatic GC)
    gap: float  # automatic GC: mean steps between two full collections of a rank
    rest: np.ndarray

    def steps(self, slow: tuple[tuple[int, int, str, float, int, tuple[int, ...]], ...] = ()
              ) -> np.ndarray:
        """The step times with slowdowns ``(a, b, kind, g, ramp, ranks)`` over ``[a, b)``:
        ``threshold`` (every rank's collections ``1 + (g - 1) w`` times more often, its
        young collections too), ``desync`` (``ranks`` back on automatic GC: ``g w`` full
        collections per step, at the base heap, and their young ones back) and ``leak``
        (every rank's heap grows by ``g`` per step, every survivor kept); ``w`` climbs
        linearly from 0 at ``a`` to 1 over ``ramp`` steps (1: a step).  Outside the
        slowdowns a rank's collections are those of the healthy series (its clock resumes
        at the span's end)."""
        heap, alloc = self.heap.copy(), self.alloc.copy()
        rate = np.full(heap.shape, 0.0 if self.manual else 1.0)
        young = np.full(heap.shape, 0.0 if self.manual else self.young)
        for a, b, kind, g, ramp, ranks in slow:
            w = np.minimum(1.0, (np.arange(b - a) + 1.0) / ramp)
            if kind == "leak":
                grown = g * (np.arange(b - a) + 1.0)
                heap[:, a:b] += grown
                alloc[:, a:b] += g / 0.25  # every leaked object survives (threshold: L / 4)
            elif kind == "threshold":
                rate[:, a:b] *= 1.0 + (g - 1.0) * w
                young[:, a:b] *= 1.0 + (g - 1.0) * w
            else:
                rows = list(ranks)
                rate[rows, a:b] = g * w * self.gap
                young[rows, a:b] = self.young * w
        inc = np.minimum(1.0, rate * alloc / heap)  # CPython: a full collection once the
        # survivors since the last one reach a quarter of the long-lived heap
        fires = np.diff(np.floor(self.phase[:, None] + np.cumsum(inc, axis=1)), axis=1,
                        prepend=np.floor(self.phase[:, None]))
        if slow:  # outside the slowdowns: the healthy collections
            base = np.minimum(1.0, (0.0 if self.manual else 1.0) * self.alloc / self.heap)
            healthy = np.diff(np.floor(self.phase[:, None] + np.cumsum(base, axis=1)), axis=1,
                              prepend=np.floor(self.phase[:, None]))
            span = np.zeros(heap.shape[1], dtype=bool)
            for a, b, *_ in slow:
                span[a:b] = True
            fires = np.where(span[None, :], fires, healthy)
        if self.manual:
            t = np.arange(heap.shape[1])
            fires = fires + (t % self.manual == self.manual - 1)[None, :]
        host = self.host + young * self.dev.mean()
        pause = fires * self.pause * heap
        # a pause stops the host; the device runs the kernels queued ahead until it idles
        busy = np.maximum(self.dev, host) + np.maximum(0.0, pause
                                                       - np.maximum(self.dev - host, 0.0))
        return np.asarray(busy.max(axis=0) + self.rest)


def _gc_pause(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Python's garbage collector in the training loop (module docstring); the corpus' noise
    is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n)
    ranks = int(rng.choice(NODE_RANKS))
    comp = _wandering_compute(rng, t, *NODE_COMPUTE)
    rj = float(rng.uniform(*NODE_RANK_JITTER))
    dev = comp[None, :] * np.exp(rj * rng.standard_normal((ranks, n)))
    hj = float(rng.uniform(*GC_HOST_JITTER))
    host = float(rng.uniform(*GC_HOST)) * np.exp(hj * rng.standard_normal((ranks, n)))
    rest = _comm_rest(rng, n, GC_COMM, GC_COMM_JITTER)
    # checkpoints (1-3 steps slower) and evaluations (one step longer, many survivors)
    rest, at = _with_ckpt_eval(rng, t, rest, comp, NODE_CKPT_EVERY, NODE_CKPT_ITERS, NODE_CKPT_X,
                               NODE_EVAL_EVERY, NODE_EVAL_X)
    # the heap: each rank's own size, growing over an epoch and released at its end
    epoch = _logint(rng, *GC_EPOCH)
    growth = float(rng.uniform(*GC_EPOCH_GROWTH))
    heap = (np.exp(GC_RANK_HEAP * rng.standard_normal(ranks))[:, None]
            * (1.0 + growth * (t % epoch) / epoch)[None, :])
    # collections: a full one once a rank's survivors reach a quarter of its heap
    manual = int(rng.choice(GC_MANUAL_EVERY)) if rng.random() < GC_MANUAL_P else 0
    p0 = _loguniform(rng, *(GC_MANUAL_PAUSE if manual else GC_PAUSE))
    gap = max(_loguniform(rng, *GC_EVERY), ranks * p0 / GC_HEALTHY_SHARE)
    sig = float(rng.uniform(*GC_ALLOC_SIGMA))
    alloc = np.exp(sig * rng.standard_normal((ranks, n)) - 0.5 * sig * sig) / gap
    alloc[:, at] += rng.uniform(*GC_EVAL_ALLOC, (ranks, int(at.sum())))
    pause = p0 * np.exp(GC_PAUSE_JITTER * rng.standard_normal((ranks, n)))
    hs = _Hosts(dev=dev, host=host, heap=heap, alloc=alloc, phase=rng.random(ranks),
                pause=pause, young=float(rng.uniform(*GC_YOUNG)), manual=manual, gap=gap,
                rest=rest)
    healthy_it = hs.steps()
    steady = healthy_it[LEAD_ITERS:]
    mean = float(steady.mean())
    var = float(steady.var()) / mean ** 2
    k = int(rng.integers(1, 4))
    part = (n - LEAD_ITERS) // k
    it = healthy_it.copy()
    slow: tuple[tuple[int, int, str, float, int, tuple[int, ...]], ...] = ()
    events: list[tuple[int, int, float, str]] = []
    for j in range(k):  # one in each of k equal parts, 40 healthy iterations after it
        if scenario != "slow" or (j > 0 and rng.random() >= SPAN_MORE_P):
            continue
        for attempt in range(SPAN_TRIES):  # fresh draws until one is decidable
            if manual:
                kind = "desync"
            else:
                kind = "leak" if rng.random() < GC_LEAK_P else "threshold"
            s = float(rng.uniform(*NODE_SLOWDOWN))
            ramp_share = float(rng.uniform(*GC_RAMP)) if rng.random() < GC_RAMP_P else 0.0
            # long enough for the rise to be five standard errors of the span's mean (the
            # span's spread about var + s x a pause), longer by what a climb loses
            need = SPAN_NEED_MARGIN * SPAN_DECIDABLE * (var + s * p0 / mean) / s ** 2
            dur = max(_logint(rng, *NODE_SLOW_ITERS), math.ceil(need))
            dur += min(GC_RAMP_MAX, math.ceil(ramp_share * dur)) // 2
            m = min(ranks // 2, int(rng.integers(GC_DESYNC[0], GC_DESYNC[1] + 1)))
            who = tuple(sorted(int(r) for r in rng.choice(ranks, max(1, m), replace=False)))
            if j == 0 and attempt == SPAN_TRIES - 1:  # the last try of a positive's first part:
                kind, ramp_share, dur = ("desync" if manual else "threshold"), 0.0, part
                who = tuple(range(ranks))
            dur = min(dur, part - 40)
            a = LEAD_ITERS + j * part + int(rng.integers(0, part - 40 - dur + 1))
            ramp = 1 if kind == "leak" else max(1, min(GC_RAMP_MAX,
                                                       int(round(ramp_share * dur))))
            found = _gc_slow(hs, it, mean, slow, (a, a + dur, kind, ramp, who), s)
            if found is None:
                continue
            lo, hi, y, g = found
            r = _decidable_rise(y, lo, hi, mean, NODE_SLOWDOWN[0], s + SPAN_OVERSHOOT,
                                NODE_SLOW_ITERS[0], SPAN_DECIDABLE)
            if r is not None:
                it = y
                slow += ((a, a + dur, kind, g, ramp, who if kind == "desync" else ()),)
                events.append((lo, hi, r, kind))
                break
    # labelled by the span's mean rise over the healthy mean
    return _quiet_timeline(_loguniform(rng, *BASE_S) * healthy_it / mean, it / healthy_it,
                           events)


def _gc_slow(hs: _Hosts, it: np.ndarray, mean: float,
             slow: tuple[tuple[int, int, str, float, int, tuple[int, ...]], ...],
             where: tuple[int, int, str, int, tuple[int, ...]], s: float
             ) -> tuple[int, int, np.ndarray, float] | None:
    """A slowdown over ``where`` = ``(a, b, kind, ramp, ranks)`` (on top of ``slow``) whose
    span (from the first step it changes to the last) rises by about ``s`` over ``mean``, its
    size ``g`` solved by bisection: ``(start, end, step times, g)``, or None where none
    does."""
    a, b, kind, ramp, who = where

    def trial(g: float) -> tuple[int, int, np.ndarray]:
        y = hs.steps(slow + ((a, b, kind, g, ramp, who),))
        # the collections move: some steps of the span are slower, a few faster
        return _changed_span(y, it, a, b, faster=True)

    if kind == "leak":  # the heap at most GC_LEAK_HEAP x the base one at the span's end
        lo_g, hi_g = 0.0, (GC_LEAK_HEAP - 1.0) / (b - a)
    elif kind == "desync":  # at most one full collection per step
        lo_g, hi_g = 0.0, 1.0
    else:
        lo_g, hi_g = 1.0, GC_RATE_MAX
    return _solve_rise(trial, mean, s, lo_g, hi_g)


def _phase_busy(dev: np.ndarray, host: np.ndarray) -> np.ndarray:
    """A rank's busy time per step (arrays ``(..., phases, chunks)``): in each phase the host
    launches its kernel groups in order, each group's kernels at an even pace over ``host``
    (its dispatch time), and the device runs each kernel once it is launched and the previous
    one is done (``dev``: a group's device time, spread evenly over its kernels; many small
    kernels, a fluid queue); a phase ends when the device has run its last kernel (a
    synchronisation: the loss read back, the gradient scaler's check, the step's end).  So a
    phase lasts the largest, over the groups' starts and ends, of the host time to launch up
    to there plus the device time from there on: the device time where the host keeps ahead,
    more where it falls behind."""
    launched = np.cumsum(host, axis=-1)
    remaining = np.cumsum(dev[..., ::-1], axis=-1)[..., ::-1]
    at_start = (launched - host + remaining).max(axis=-1)
    at_end = (launched + remaining - dev).max(axis=-1)
    return np.asarray(np.maximum(at_start, at_end).sum(axis=-1))


@dataclass(frozen=True)
class _HostSlow:
    """A slowdown of the host side over steps ``[a, b)`` of ``ranks``: its kind, its size
    ``g``, the steps over which it climbs (1: a step) and, for ``sync``, its period."""

    a: int
    b: int
    kind: str
    g: float
    ramp: int
    ranks: tuple[int, ...]
    every: int = 1


@dataclass(frozen=True)
class _Dispatch:
    """The draws of a :func:`_dispatch` series (arrays ``(ranks, n, phases, chunks)`` or
    ``(ranks, n)``): each kernel group's device time and host (dispatch) time, the slot of the
    metrics group (the last chunk of the optimizer phase, empty in healthy steps), the
    fluctuation of a neighbour's load, the phase of the quota's period at each step's start,
    the period (in the units of the step), each rank's healthy busy time and the step's
    exposed all-reduce and extra work (checkpoints, evaluations)."""

    dev: np.ndarray
    host: np.ndarray
    load: np.ndarray
    phase: np.ndarray
    period: float
    busy: np.ndarray
    rest: np.ndarray

    def window(self, sl: _HostSlow) -> np.ndarray:
        """The busy time of ``sl.ranks`` over ``[sl.a, sl.b)`` under the slowdown ``sl``:
        ``neighbour`` (a co-located process: the host ``1 + g w x load`` times slower, the load
        fluctuating from step to step), ``freq_cap`` (the host ``1 + g w`` times slower),
        ``quota`` (CFS bandwidth control: each time the host has run ``(1 - g w)`` of a
        period it is stalled for the rest of the period, ``g w`` of it) or ``sync`` (every
        ``every`` steps, metrics of ``g`` mean steps of host work launched after the
        optimizer, many small kernels, then read back); ``w`` climbs linearly from 0 at ``a``
        to 1 over ``ramp`` steps."""
        rows = list(sl.ranks)
        w = np.minimum(1.0, (np.arange(sl.b - sl.a) + 1.0) / sl.ramp)
        dev = self.dev[rows, sl.a:sl.b].copy()
        host = self.host[rows, sl.a:sl.b].copy()
        if sl.kind == "neighbour":
            host *= (1.0 + sl.g * w * self.load[rows, sl.a:sl.b])[:, :, None, None]
        elif sl.kind == "freq_cap":
            host *= (1.0 + sl.g * w)[None, :, None, None]
        elif sl.kind == "quota":
            shape = host.shape
            flat = host.reshape(shape[0], shape[1], -1)
            gw = (sl.g * w)[None, :, None]
            run = (1.0 - gw) * self.period  # the host's run time in each period
            clock = self.phase[rows, sl.a:sl.b, None] + np.cumsum(flat, axis=2) / run
            stalls = np.diff(np.floor(clock), axis=2,
                             prepend=np.floor(self.phase[rows, sl.a:sl.b, None]))
            host = (flat + stalls * gw * self.period).reshape(shape)
        else:
            at = (np.arange(sl.b - sl.a) % sl.every == 0) * w
            host[:, :, 2, -1] += sl.g * at[None, :]
            dev[:, :, 2, -1] += HD_SYNC_DEV * sl.g * at[None, :]
        busy = self.busy[:, sl.a:sl.b].copy()
        busy[rows] = _phase_busy(dev, host)
        return busy

    def steps(self, slow: tuple[_HostSlow, ...] = ()) -> np.ndarray:
        """The step times (the slowest rank's busy time plus the rest) with the slowdowns
        ``slow`` (disjoint spans)."""
        busy = self.busy.copy()
        for sl in slow:
            busy[:, sl.a:sl.b] = self.window(sl)
        return np.asarray(busy.max(axis=0) + self.rest)


def _bursts(rng: np.random.Generator, ranks: int, n: int, duty: float, run: float
            ) -> np.ndarray:
    """``(ranks, n)``: 1 where a bursty process is on, else 0 (a two-state chain per rank: on
    for runs of mean ``run`` steps, off for runs of mean ``run (1 - duty) / duty``)."""
    out = np.zeros((ranks, n))
    k = 2 * int(n / run) + 2
    for r in range(ranks):  # a handful of ranks: one vectorised draw each
        on = rng.geometric(min(1.0, 1.0 / run), k)
        off = (rng.geometric(min(1.0, duty / (run * (1.0 - duty))), k) if duty < 1.0
               else np.zeros(k, dtype=np.int64))
        ends = np.cumsum(np.stack([off, on], axis=1).ravel())
        state = np.searchsorted(ends, np.arange(n), side="right") % 2  # odd runs are on
        out[r] = np.where(np.arange(n) < ends[-1], state, 1)
    return out


def _dispatch(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Host dispatch-bound steps (module docstring); the corpus' noise is turned off
    (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n)
    ranks = int(rng.choice(NODE_RANKS))
    base_s = _loguniform(rng, *BASE_S)
    k = int(rng.integers(1, 4))
    part = (n - LEAD_ITERS) // k
    starts = LEAD_ITERS + part * np.arange(k)
    # batch shapes: a part after the first may run another shape (the device time moves, the
    # kernels launched, and so the host time, do not)
    changed = np.zeros(k, dtype=bool)
    shape = np.ones(n)
    level = 1.0
    for j in range(1, k):
        if rng.random() < HD_SHAPE_P:
            changed[j] = True
            level *= float(rng.uniform(*HD_SHAPE))
            shape[starts[j]:] = level
    comp = _wandering_compute(rng, t, *NODE_COMPUTE) * shape
    rj = float(rng.uniform(*NODE_RANK_JITTER))
    dev_rate = comp[None, :] * np.exp(rj * rng.standard_normal((ranks, n)))
    # phases (forward, backward, optimizer): their device shares, and each kernel group's
    # share of its phase's device and host time (the same kernels every step)
    ph = np.array([1.0, rng.uniform(*HD_BACKWARD), rng.uniform(*HD_OPT)])
    ph /= ph.sum()
    rho = np.array([rng.uniform(*HD_HOST_FWD), rng.uniform(*HD_HOST_BWD),
                    rng.uniform(*HD_HOST_OPT)])
    conc = np.full(HD_CHUNKS, HD_CHUNK_CONC)
    d_share = rng.dirichlet(conc, 3) * ph[:, None]
    h_share = rng.dirichlet(conc, 3) * (ph * rho)[:, None]
    hj = float(rng.uniform(*HD_HOST_JITTER))
    host_x = np.exp(hj * rng.standard_normal((ranks, n, 3)) - 0.5 * hj * hj)
    # host spikes: one phase of one rank's step far slower (page faults, the scheduler)
    spike = rng.random((ranks, n)) < rng.uniform(*HD_SPIKE_RATE)
    ri, ti = np.nonzero(spike)
    host_x[ri, ti, rng.integers(0, 3, ri.size)] *= _loguniforms(rng, *HD_SPIKE_X, ri.size)
    dev = np.zeros((ranks, n, 3, HD_CHUNKS + 1))  # the last slot: the metrics group
    host = np.zeros_like(dev)
    dev[..., :HD_CHUNKS] = dev_rate[:, :, None, None] * d_share
    host[..., :HD_CHUNKS] = host_x[..., None] * h_share
    # the rest of the step: the exposed all-reduce, checkpoints, evaluations
    rest = _comm_rest(rng, n, HD_COMM, HD_COMM_JITTER)
    rest, _ = _with_ckpt_eval(rng, t, rest, comp, NODE_CKPT_EVERY, NODE_CKPT_ITERS, NODE_CKPT_X,
                              NODE_EVAL_EVERY, NODE_EVAL_X)
    # a neighbour's load: bursts (on a share of the steps, in runs) that fluctuate
    load_sd = float(rng.uniform(*HD_NEIGHBOUR_JITTER))
    load = np.exp(load_sd * rng.standard_normal((ranks, n)) - 0.5 * load_sd * load_sd)
    load *= _bursts(rng, ranks, n, float(rng.uniform(*HD_NEIGHBOUR_DUTY)),
                    _loguniform(rng, *HD_NEIGHBOUR_RUN))
    hd = _Dispatch(dev=dev, host=host, load=load, phase=rng.random((ranks, n)), period=1.0,
                   busy=_phase_busy(dev, host), rest=rest)
    # a CPU neighbour that comes and goes on one rank without crossing the device time: kept
    # where the mean step over its episode rises by less than HD_HIDDEN_RISE (halved until)
    for _ in range(int(rng.integers(HD_HIDDEN[0], HD_HIDDEN[1] + 1))):
        dur = _logint(rng, *HD_HIDDEN_ITERS)
        a = int(rng.integers(0, n - dur))
        rk = int(rng.integers(0, ranks))
        u = float(rng.uniform(*HD_HIDDEN_X))
        before = hd.steps()[a:a + dur]
        for _halving in range(4):
            busy = hd.window(_HostSlow(a, a + dur, "neighbour", u, 1, (rk,)))
            if float((busy.max(axis=0) + rest[a:a + dur]).mean() / before.mean()) < (
                    1.0 + HD_HIDDEN_RISE):
                host[rk, a:a + dur] *= (1.0 + u * load[rk, a:a + dur])[:, None, None]
                hd.busy[:, a:a + dur] = busy
                break
            u /= 2.0
    healthy_it = hd.steps()
    steady = healthy_it[LEAD_ITERS:]
    mean = float(steady.mean())
    var = float(steady.var()) / mean ** 2
    # the quota's period in the units of the step (the series' mean step is base_s seconds)
    hd = _Dispatch(dev=dev, host=host, load=load, phase=hd.phase,
                   period=HD_PERIOD_S * mean / base_s, busy=hd.busy, rest=rest)
    it = healthy_it.copy()
    slow: tuple[_HostSlow, ...] = ()
    events: list[tuple[int, int, float, str]] = []
    kinds = [kd for kd, _ in HD_KINDS]
    kind_p = np.array([p for _, p in HD_KINDS])
    for j in range(k):  # one in each of k parts, away from a batch-shape change
        if scenario != "slow" or (j > 0 and rng.random() >= SPAN_MORE_P):
            continue
        lo_room = int(starts[j]) + (SPAN_SETTLE if changed[j] else 0)
        hi_room = int(starts[j]) + part - (SPAN_CLEAR if j + 1 < k and changed[j + 1] else 40)
        room = hi_room - lo_room
        for attempt in range(SPAN_TRIES):  # fresh draws until one is decidable
            kind = kinds[int(rng.choice(len(kinds), p=kind_p))]
            s = float(rng.uniform(*NODE_SLOWDOWN))
            ramp_share = float(rng.uniform(*HD_RAMP)) if rng.random() < HD_RAMP_P else 0.0
            if kind in ("quota", "sync"):  # a limit or a code change: at once
                ramp_share = 0.0
            period = int(rng.choice(HD_SYNC_EVERY))
            # long enough for the rise to be five standard errors of the span's mean (its
            # spread about the healthy one plus, for lumpy kinds, about the rise itself),
            # longer by what a climb loses
            lumps = {"neighbour": 1.0, "quota": 1.0, "freq_cap": 0.0, "sync": period - 1.0}
            need = SPAN_NEED_MARGIN * SPAN_DECIDABLE * (var / s ** 2 + lumps[kind])
            dur = max(_logint(rng, *NODE_SLOW_ITERS), math.ceil(need))
            dur += min(HD_RAMP_MAX, math.ceil(ramp_share * dur)) // 2
            m = min(max(1, ranks // 2), int(rng.integers(HD_WHO[0], HD_WHO[1] + 1)))
            who = tuple(sorted(int(r) for r in rng.choice(ranks, m, replace=False)))
            node = int(rng.integers(0, (ranks + HD_NODE - 1) // HD_NODE))
            if kind == "freq_cap":  # every rank of one node
                who = tuple(range(node * HD_NODE, min(ranks, (node + 1) * HD_NODE)))
            elif kind == "sync":
                who = tuple(range(ranks))
            if j == 0 and attempt == SPAN_TRIES - 1:  # the last try of a positive's first part:
                kind, ramp_share, dur, period = "sync", 0.0, room, 1  # a level, its whole room
                who = tuple(range(ranks))
            dur = min(dur, room)
            a = lo_room + int(rng.integers(0, room - dur + 1))
            ramp = max(1, min(HD_RAMP_MAX, int(round(ramp_share * dur))))
            found = _hd_slow(hd, it, healthy_it, slow, _HostSlow(a, a + dur, kind, 0.0, ramp,
                                                                  who, period), s)
            if found is None:
                continue
            lo, hi, y, sl = found
            r = _decidable_rise(y, lo, hi, float(healthy_it[lo:hi].mean()), NODE_SLOWDOWN[0],
                                s + SPAN_OVERSHOOT, NODE_SLOW_ITERS[0], SPAN_DECIDABLE)
            if r is not None and _hd_visible(healthy_it, y, lo, hi):
                it = y
                slow += (sl,)
                events.append((lo, hi, r, kind))
                break
    # labelled by the span's mean rise over its healthy mean
    return _quiet_timeline(base_s * healthy_it / mean, it / healthy_it, events)


def _hd_visible(healthy_it: np.ndarray, y: np.ndarray, lo: int, hi: int,
                after: bool = True) -> bool:
    """Whether the span ``y[lo:hi]`` stands ``NODE_SLOWDOWN[0]`` above the healthy steps of the
    :data:`HD_AROUND` before it and of those after it too (each side's
    :data:`HD_AROUND_DROP` longest left out; ``after`` False: the steps before it only): a
    level that wanders nearby does not hide a label measured against the span's own healthy
    mean."""
    span = float(y[lo:hi].mean())
    sides = (healthy_it[max(0, lo - HD_AROUND):lo], healthy_it[hi:hi + HD_AROUND])
    for side in sides if after else sides[:1]:
        if side.size > HD_AROUND_DROP and span < (1.0 + NODE_SLOWDOWN[0]) * float(
                np.sort(side)[:side.size - HD_AROUND_DROP].mean()):
            return False
    return True


def _hd_slow(hd: _Dispatch, it: np.ndarray, healthy_it: np.ndarray,
             slow: tuple[_HostSlow, ...], where: _HostSlow, s: float
             ) -> tuple[int, int, np.ndarray, _HostSlow] | None:
    """A host slowdown like ``where`` (on top of ``slow``) whose span (from the first step it
    changes to the last) rises by about ``s`` over its healthy mean, its size ``g`` solved by
    bisection: ``(start, end, step times, the slowdown)``, or None where none does."""
    a, b = where.a, where.b

    def sized(g: float) -> _HostSlow:
        return _HostSlow(a, b, where.kind, g, where.ramp, where.ranks, where.every)

    def trial(g: float) -> tuple[int, int, np.ndarray]:
        y = it.copy()
        busy = hd.busy.copy()
        busy[:, a:b] = hd.window(sized(g))
        y[a:b] = busy[:, a:b].max(axis=0) + hd.rest[a:b]
        return _changed_span(y, it, a, b)

    top = {"neighbour": HD_NEIGHBOUR_MAX, "freq_cap": HD_FREQ_MAX, "quota": HD_QUOTA_MAX,
           "sync": HD_SYNC_MAX}[where.kind]
    found = _solve_rise(trial, 1.0, s, 0.0, top, base=healthy_it)
    if found is None:
        return None
    lo, hi, y, g = found
    return lo, hi, y, sized(g)


@dataclass(frozen=True)
class _MoeSlow:
    """A slowdown of a :func:`_moe` series over steps ``[a, b)``, then ``tail`` steps in which
    the gate returns to balance: its kind, its size ``g``, the steps over which it climbs (1:
    a step), the favoured expert of each layer (``collapse``) or the slow rank
    (``slow_rank``), and, for ``domain``, ``keep`` (the share of the skew the balancing loss
    leaves) and ``share`` (the new domain's share of the batch)."""

    a: int
    b: int
    kind: str
    g: float
    ramp: int = 1
    tail: int = 0
    who: tuple[int, ...] = ()
    keep: float = 1.0
    share: float = 1.0


@dataclass
class _Experts:
    """The draws of a :func:`_moe` series (arrays ``(n, layers, experts)``, ``(ranks, n)`` or
    ``(n,)``): the normal draws of each expert's token count, the batch's routing shares (its
    domains' preferences, mixed), the gate's bias and its innovations, a new domain's routing
    shares, each rank's cost per token, the device's rate, the restarts' warm-ups, the
    configuration at each step (its level, expert-parallel size and capacity factor), whether
    the experts' buffers are padded to the capacity, the token assignments per expert at
    balance, the MoE share and its fixed part, the balancing time constant, and the step's
    exposed all-reduce and extra work."""

    count_z: np.ndarray
    mix: np.ndarray
    bias: np.ndarray
    innov: np.ndarray
    domain: np.ndarray
    cost: np.ndarray
    rate: np.ndarray
    warm: np.ndarray
    level: np.ndarray
    ep: np.ndarray
    cap: np.ndarray
    padded: bool
    tokens: float
    share: float
    fixed: float
    tau: float
    rest: np.ndarray

    def busy(self, a: int, b: int, sl: _MoeSlow | None = None,
             warm: np.ndarray | None = None) -> np.ndarray:
        """The busy time of steps ``[a, b)`` (the whole step but its exposed all-reduce and
        extra work) under the slowdown ``sl`` (``warm``: the warm-ups over ``[a, b)``, else
        the series'), computed per stretch of one configuration."""
        out = np.empty(b - a)
        cut = np.flatnonzero((np.diff(self.ep[a:b]) != 0) | (np.diff(self.cap[a:b]) != 0)) + 1
        bounds = [0, *cut.tolist(), b - a]
        for u, v in zip(bounds[:-1], bounds[1:], strict=True):
            out[u:v] = self._stretch(a + u, a + v, sl)
        w = self.warm[a:b] if warm is None else warm
        return np.asarray(out * w * self.level[a:b] * self.rate[a:b])

    def _stretch(self, a: int, b: int, sl: _MoeSlow | None) -> np.ndarray:
        """``(1 - share) + share x`` the MoE layers' time over ``[a, b)`` (one configuration):
        each layer routes the batch's tokens by its shares tilted by the gate's bias, each
        expert's count is normal about its mean (Poisson's spread), cut at the capacity (or
        the capacity itself, where the buffers are padded to it); the layer waits for the
        rank with the most load times its cost per token (the dispatch and combine
        all-to-alls and the expert compute), over the balanced load."""
        ranks, cap = int(self.ep[a]), float(self.cap[a])
        mix, bias = self.mix[a:b], self.bias[a:b]
        cost = self.cost[:ranks, a:b].T
        if sl is not None:
            t = np.arange(a, b)
            inside = (t >= sl.a) & (t < sl.b)
            w = np.where(inside, np.minimum(1.0, (t - sl.a + 1.0) / sl.ramp), 0.0)
            after = (t >= sl.b) & (t < sl.b + sl.tail)
            w = np.where(after, 1.0 - (t - sl.b + 1.0) / (sl.tail + 1.0), w)
            caps = np.full(b - a, cap)
            if sl.kind == "collapse":  # ``who``: the favoured experts of each layer in turn
                fav = np.array(sl.who).reshape(bias.shape[1], -1)
                bias = bias.copy()
                bias[:, np.arange(bias.shape[1])[:, None], fav] += sl.g * w[:, None, None]
            elif sl.kind == "aux_off":  # the updates are no longer pulled back: they walk
                walk = np.cumsum(np.where(inside[:, None, None], self.innov[a:b], 0.0), axis=0)
                if a > sl.a:
                    walk += self.innov[sl.a:min(a, sl.b)].sum(axis=0)
                end = self.innov[sl.a:sl.b].sum(axis=0)
                walk = np.where(inside[:, None, None], walk,
                                np.where(after[:, None, None], end * w[:, None, None], 0.0))
                bias = bias + sl.g * walk
            elif sl.kind == "domain":
                h = sl.share * w * (sl.keep + (1.0 - sl.keep)
                                    * np.exp(-(t - sl.a) / self.tau))
                dom = np.exp(sl.g * (self.domain - self.domain.max(axis=1, keepdims=True)))
                dom /= dom.sum(axis=1, keepdims=True)
                mix = (1.0 - h)[:, None, None] * mix + h[:, None, None] * dom
            elif sl.kind == "capacity":
                caps = np.where(inside, cap * (1.0 + sl.g), cap)
            else:
                cost = cost.copy()
                cost[:, sl.who[0]] *= 1.0 + sl.g * w
        else:
            caps = np.full(b - a, cap)
        logit = np.log(mix) + bias
        p = np.exp(logit - logit.max(axis=2, keepdims=True))
        lam = self.tokens * p.shape[2] * p / p.sum(axis=2, keepdims=True)
        count = np.maximum(0.0, lam + np.sqrt(lam) * self.count_z[a:b])
        if cap > 0.0 and self.padded:  # every buffer as large as the capacity
            count = np.broadcast_to(caps[:, None, None] * self.tokens, count.shape)
        elif cap > 0.0:
            count = np.minimum(count, caps[:, None, None] * self.tokens)
        load = count.reshape(b - a, count.shape[1], ranks, -1).sum(axis=3)
        worst = (load * cost[:, None, :]).max(axis=2) * ranks / (self.tokens * count.shape[2])
        moe = (self.fixed + (1.0 - self.fixed) * worst).mean(axis=1)
        return np.asarray((1.0 - self.share) + self.share * moe)

    def steps(self) -> np.ndarray:
        return np.asarray(self.busy(0, self.rest.size) + self.rest)


def _restart_warm(rng: np.random.Generator, first: tuple[float, float],
                  amplitude: tuple[float, float], tau: tuple[float, float]
                  ) -> tuple[float, float, float]:
    """A restart's warm-up (applied by :func:`_moe_rewarm`): its first step's factor
    (log-uniform in ``first``), the hump's amplitude and time constant (uniform)."""
    return (_loguniform(rng, *first), float(rng.uniform(*amplitude)), float(rng.uniform(*tau)))


def _moe_rewarm(warm: np.ndarray, t0: int, how: tuple[float, float, float]) -> None:
    """Apply the warm-up ``how`` of a restart at ``t0`` to ``warm`` (in place)."""
    first, amp, tau = how
    warm[t0] *= first
    j = np.arange(warm.size - t0 - 1)
    warm[t0 + 1:] *= 1.0 + amp * np.exp(-j / tau)


def _moe(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Mixture-of-experts load imbalance under expert parallelism (module docstring); the
    corpus' noise is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n)
    experts = int(rng.choice(ME_EXPERTS))
    layers = int(rng.choice(ME_LAYERS))
    ep_sizes = [p for p in ME_RANKS if p <= experts]
    base_s = _loguniform(rng, *BASE_S)
    k = int(rng.integers(1, 4))
    part = (n - LEAD_ITERS) // k
    starts = LEAD_ITERS + part * np.arange(k)
    # the configuration of each part: a planned restart may change the expert-parallel size
    # or the capacity factor
    ep = np.full(n, int(rng.choice(ep_sizes)))
    cap = np.full(n, 0.0 if rng.random() < ME_DROPLESS_P else float(rng.choice(ME_CAPACITY)))
    restarted = np.zeros(k, dtype=bool)
    warm = np.ones(n)
    pauses: list[tuple[int, float]] = []
    for j in range(1, k):
        if rng.random() < NODE_RESTART_P:
            restarted[j] = True
            s0 = int(starts[j])
            if rng.random() < 0.5:
                ep[s0:] = int(rng.choice([p for p in ep_sizes if p != ep[s0 - 1]]))
            else:
                cap[s0:] = float(rng.choice([c for c in (*ME_CAPACITY, 0.0)
                                             if c != cap[s0 - 1]]))
            _moe_rewarm(warm, s0, _restart_warm(rng, *NODE_WARM))
            pauses.append((s0, _loguniform(rng, *NODE_DOWNTIME)))
    rate = _wandering_compute(rng, t, *NODE_COMPUTE)
    rj = float(rng.uniform(*NODE_RANK_JITTER))
    cost = np.exp(rj * rng.standard_normal((max(ep_sizes), n)))
    # the batch's routing: a mixture of domains (Dirichlet per step), each with its own
    # preferences; the gate's bias wanders about balance, pulled back by the balancing loss
    domains = int(rng.integers(ME_DOMAINS[0], ME_DOMAINS[1] + 1))
    dsd = float(rng.uniform(*ME_DOMAIN_SD))
    pref = np.exp(dsd * rng.standard_normal((domains, layers, experts)))
    pref /= pref.sum(axis=2, keepdims=True)
    weights = rng.dirichlet(np.full(domains, _loguniform(rng, *ME_MIX_CONC) / domains), n)
    mix = np.einsum("td,dle->tle", weights, pref)
    tau = _loguniform(rng, *ME_BALANCE_TAU)
    phi = math.exp(-1.0 / tau)
    innov = (float(rng.uniform(*ME_BIAS_SD)) * math.sqrt(1.0 - phi * phi)
             * rng.standard_normal((n, layers, experts)))
    bias = lfilter([1.0], [1.0, -phi], innov, axis=0)
    new = rng.standard_normal((layers, experts))
    # the rest of the step: the exposed all-reduce, checkpoints, evaluations
    rest = _comm_rest(rng, n, ME_COMM, ME_COMM_JITTER)
    rest, _ = _with_ckpt_eval(rng, t, rest, rate, NODE_CKPT_EVERY, NODE_CKPT_ITERS, NODE_CKPT_X,
                              NODE_EVAL_EVERY, NODE_EVAL_X)
    ex = _Experts(count_z=rng.standard_normal((n, layers, experts)), mix=mix, bias=bias,
                  innov=innov, domain=new, cost=cost,
                  rate=rate, warm=warm, level=np.ones(n), ep=ep, cap=cap,
                  padded=bool(rng.random() < ME_PAD_P),
                  tokens=_loguniform(rng, *ME_TOKENS), share=float(rng.uniform(*ME_SHARE)),
                  fixed=float(rng.uniform(*ME_FIXED)), tau=tau, rest=rest)
    # a restart's new configuration: its mean busy time drawn against the old one's
    ends = [*starts[1:].tolist(), n]
    for j in range(1, k):
        if restarted[j]:
            s0, s1 = int(starts[j]), ends[j]
            old = ex.busy(int(starts[j - 1]) + 100, s0).mean()
            raw = ex.busy(s0 + 100, s1).mean()
            ex.level[s0:] *= float(rng.uniform(*ME_RESTART_LEVEL)) * old / raw
    # gate drifts that the balancing loss pulls back: kept where the mean step over the
    # drift rises by less than ME_DRIFT_RISE (halved until)
    for _ in range(int(rng.integers(ME_DRIFTS[0], ME_DRIFTS[1] + 1))):
        build = _logint(rng, *ME_DRIFT_BUILD)
        a = int(rng.integers(0, n - build - 1))
        b = min(n, a + build + int(5 * tau))
        pushed = rng.integers(0, experts, layers)
        push = float(rng.uniform(*ME_DRIFT_PUSH))
        since = np.arange(b - a)
        shape = np.where(since < build, (since + 1.0) / build,
                         np.exp(-(since - build + 1.0) / tau))
        before = ex.busy(a, b)
        saved = ex.bias[a:b].copy()
        for _halving in range(4):
            ex.bias[a:b, np.arange(layers), pushed] = saved[:, np.arange(layers), pushed] + (
                push * shape[:, None])
            if float(ex.busy(a, b).mean() / before.mean()) < 1.0 + ME_DRIFT_RISE:
                break
            push /= 2.0
        else:
            ex.bias[a:b] = saved
    healthy_it = ex.steps()
    steady = healthy_it[LEAD_ITERS:]
    mean = float(steady.mean())
    var = float(steady.var()) / mean ** 2
    it = healthy_it.copy()
    events: list[tuple[int, int, float, str]] = []
    kinds = [kd for kd, _ in ME_KINDS]
    kind_p = np.array([p for _, p in ME_KINDS])
    for j, lo_room, hi_room in _part_rooms(rng, scenario, starts, part, restarted, SPAN_MORE_P,
                                           SPAN_SETTLE, SPAN_CLEAR):
        capped = float(cap[lo_room]) > 0.0
        for attempt in range(SPAN_TRIES):  # fresh draws until one is decidable
            # under a capacity the skew costs no time beyond it (the tokens are dropped): the
            # kinds that skew the routing where it is dropless, a raised capacity where not
            able = kind_p * np.array([(kd == "slow_rank" or (kd == "capacity") == capped)
                                      for kd in kinds])
            kind = kinds[int(rng.choice(len(kinds), p=able / able.sum()))]
            s = float(rng.uniform(*NODE_SLOWDOWN))
            ramp_share = float(rng.uniform(*ME_RAMP)) if rng.random() < ME_RAMP_P else 0.0
            need = SPAN_NEED_MARGIN * SPAN_DECIDABLE * var / s ** 2
            dur = max(_logint(rng, *NODE_SLOW_ITERS), math.ceil(need))
            tail = int(rng.integers(ME_RECOVER[0], ME_RECOVER[1] + 1))
            build = _logint(rng, *ME_COLLAPSE_BUILD)
            keep = float(rng.uniform(*ME_DOMAIN_KEEP))
            dshare = float(rng.uniform(*ME_DOMAIN_SHARE))
            how = (_restart_warm(rng, *NODE_WARM), _restart_warm(rng, *NODE_WARM))
            down = (_loguniform(rng, *NODE_DOWNTIME), _loguniform(rng, *NODE_DOWNTIME))
            if j == 0 and attempt == SPAN_TRIES - 1:  # the last try of a positive's first part:
                kind, ramp_share, dur = "slow_rank", 0.0, hi_room - lo_room  # its whole room
            if kind == "collapse":
                ramp = min(build, dur)
            elif kind in ("domain", "slow_rank"):
                ramp = max(1, min(ME_RAMP_MAX, int(round(ramp_share * dur))))
                dur += (ramp - 1) // 2
            else:
                ramp = 1
            tail = tail if kind in ("collapse", "aux_off") else 0
            dur = max(1, min(dur, hi_room - lo_room - tail))
            a = lo_room + int(rng.integers(0, hi_room - lo_room - tail - dur + 1))
            b = a + dur
            pick = float(rng.random())
            if kind == "collapse":  # the most popular experts at the start get more
                pop = ex.mix[a] * np.exp(ex.bias[a])
                top = np.argsort(-pop, axis=1)[:, :int(rng.integers(ME_FAVOURED[0],
                                                                     ME_FAVOURED[1] + 1))]
                who = tuple(int(x) for x in top.ravel())
                top_g = ME_COLLAPSE_MAX
            elif kind == "slow_rank":
                who, top_g = (int(pick * int(ep[a])),), ME_RANK_MAX
            else:
                who = ()
                top_g = {"aux_off": ME_AUX_MAX, "capacity": ME_CAP_MAX,
                         "domain": ME_DOMAIN_MAX}[kind]
            # a configuration change (aux_off, capacity): a restart at the span's start and
            # another at its end that restores the old one; the counterfactual healthy series
            # has the same restarts with the old configuration
            restart = kind in ("aux_off", "capacity")
            hi_w = b + tail
            hw, base, y0 = ex.warm, healthy_it, it
            if restart:
                hw, base, y0 = _restart_counterfactual(
                    ex.warm, ((a, how[0]), (b, how[1])),
                    lambda w: np.asarray(ex.busy(0, n, warm=w) + rest), it, events)

            def sized(g: float, kd: str = kind, a_: int = a, b_: int = b, rp: int = ramp,
                      tl_: int = tail, wh: tuple[int, ...] = who, kp: float = keep,
                      sh: float = dshare) -> _MoeSlow:
                return _MoeSlow(a_, b_, kd, g, rp, tl_, wh, kp, sh)

            def trial(g: float, a_: int = a, hi_: int = hi_w, hw_: np.ndarray = hw,
                      y0_: np.ndarray = y0, sized_: Callable[[float], _MoeSlow] = sized
                      ) -> tuple[int, int, np.ndarray]:
                y = y0_.copy()
                y[a_:hi_] = ex.busy(a_, hi_, sized_(g), hw_[a_:hi_]) + rest[a_:hi_]
                return _changed_span(y, y0_, a_, hi_, faster=True)

            got = _visible_rise(_solve_rise(trial, 1.0, s, 0.0, top_g, base=base,
                                            steps=SPAN_SOLVE_STEPS),
                                base, NODE_SLOWDOWN[0], s + SPAN_OVERSHOOT, NODE_SLOW_ITERS[0],
                                SPAN_DECIDABLE)
            if got is not None:
                lo, hi, it, r = got
                if restart:
                    ex.warm = hw
                    healthy_it = base
                    pauses += [(a, down[0]), (b, down[1])]
                events.append((lo, hi, r, kind))
                break
    # labelled by the span's mean rise over its healthy mean
    return _restarted_timeline(base_s * healthy_it / mean, it / healthy_it, events, pauses)


def _backward(comp: np.ndarray, comm: np.ndarray, blocked: np.ndarray) -> np.ndarray:
    """The backward pass's time (arrays ``(..., buckets)``, the buckets in the order their
    gradients are ready): each bucket's compute runs on the compute queue, one after the
    other; its reduce-scatter runs on the communication stream once its gradients are computed
    and the previous reduce-scatter is done.  Where a reduce-scatter sits in the same hardware
    queue as the compute launched after it (``blocked``: too few CUDA_DEVICE_MAX_CONNECTIONS
    for the streams, or a kernel order that puts it there), that compute cannot start before
    the reduce-scatter is done (a false dependency).  The pass ends when both are done."""
    done = np.zeros(comp.shape[:-1])
    sent = np.zeros_like(done)
    for j in range(comp.shape[-1]):  # 8-32 buckets, each vectorised over the steps
        done = done + comp[..., j]
        sent = np.maximum(done, sent) + comm[..., j]
        done = np.where(blocked[..., j], np.maximum(done, sent), done)
    return np.asarray(np.maximum(done, sent))


@dataclass(frozen=True)
class _QueueSlow:
    """A slowdown of a :func:`_hw_queue` series over steps ``[a, b)``: its kind, its size
    ``g``, the steps over which it climbs (1: a step) and its buckets (``connections`` /
    ``order``: the order in which they land on the compute queue, the first ``ceil(g x
    buckets)`` of them; ``bucket``: the buckets whose bytes grow)."""

    a: int
    b: int
    kind: str
    g: float
    ramp: int = 1
    who: tuple[int, ...] = ()


@dataclass
class _Queues:
    """The draws of a :func:`_hw_queue` series (arrays ``(n, buckets)`` or ``(n,)``): each
    bucket's backward compute at the device's rate, its reduce-scatter's time at the nominal
    bandwidth, the bandwidth (jitter, congestion), which reduce-scatters share the compute
    queue, the forward and optimizer compute, the restarts' warm-ups, and the extra work
    (checkpoints, evaluations)."""

    comp: np.ndarray
    size: np.ndarray
    bw: np.ndarray
    blocked: np.ndarray
    fwd: np.ndarray
    warm: np.ndarray
    rest: np.ndarray

    def steps(self, a: int, b: int, sl: _QueueSlow | None = None,
              warm: np.ndarray | None = None) -> np.ndarray:
        """The step times over ``[a, b)`` under the slowdown ``sl`` (``warm``: the series'
        warm-ups, else its own): ``connections`` / ``order`` put more reduce-scatters on the
        compute queue, ``bucket`` makes some buckets' bytes ``1 + g w`` times larger,
        ``link`` divides the bandwidth by ``1 + g w`` (``w`` climbs linearly from 0 at ``a``
        to 1 over ``ramp`` steps)."""
        wu = (self.warm if warm is None else warm)[a:b]
        size, bw, blocked = self.size[a:b], self.bw[a:b], self.blocked[a:b]
        if sl is not None:
            t = np.arange(a, b)
            inside = (t >= sl.a) & (t < sl.b)
            w = np.where(inside, np.minimum(1.0, (t - sl.a + 1.0) / sl.ramp), 0.0)
            who = np.array(sl.who, dtype=np.int64)
            if sl.kind in ("connections", "order"):
                blocked = blocked.copy()
                blocked[np.ix_(inside, who[:math.ceil(sl.g * who.size - 1e-9)])] = True
            elif sl.kind == "bucket":
                size = size.copy()
                size[:, who] *= (1.0 + sl.g * w)[:, None]
            else:
                bw = bw / (1.0 + sl.g * w)[:, None]
        return np.asarray(self.fwd[a:b] * wu + _backward(self.comp[a:b] * wu[:, None],
                                                         size / bw, blocked) + self.rest[a:b])


def _hw_queue(rng: np.random.Generator, scenario: str) -> _Timeline:
    """CUDA hardware-queue false dependencies between reduce-scatters and compute (module
    docstring); the corpus' noise is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n)
    nb = _logint(rng, *HQ_BUCKETS)
    base_s = _loguniform(rng, *BASE_S)
    k = int(rng.integers(1, 4))
    part = (n - LEAD_ITERS) // k
    starts = LEAD_ITERS + part * np.arange(k)
    ends = [*starts[1:].tolist(), n]
    rate = _wandering_compute(rng, t, *NODE_COMPUTE)
    kj = float(rng.uniform(*HQ_KERNEL_JITTER))
    comp = (rate[:, None] * rng.dirichlet(np.full(nb, HQ_BUCKET_CONC))[None, :]
            * np.exp(kj * rng.standard_normal((n, nb)) - 0.5 * kj * kj))
    fo = float(rng.uniform(*HQ_FORWARD) + rng.uniform(*HQ_OPT))
    size = np.repeat((float(rng.uniform(*HQ_COMM))
                      * rng.dirichlet(np.full(nb, HQ_BUCKET_CONC)))[None, :], n, axis=0)
    bj = float(rng.uniform(*HQ_BW_JITTER))
    bw = np.exp(bj * rng.standard_normal((n, nb)) - 0.5 * bj * bj)
    # congestion spikes: the bandwidth divided by 1.5-4 for 1-5 steps (exposed communication)
    hit = np.flatnonzero(rng.random(n) < rng.uniform(*HQ_CONGEST_RATE))
    length = rng.integers(HQ_CONGEST_ITERS[0], HQ_CONGEST_ITERS[1] + 1, hit.size)
    x = _loguniforms(rng, *HQ_CONGEST_X, hit.size)
    idx = hit[:, None] + np.arange(HQ_CONGEST_ITERS[1])[None, :]
    on = (np.arange(HQ_CONGEST_ITERS[1])[None, :] < length[:, None]) & (idx < n)
    cong = np.ones(n)
    np.maximum.at(cong, idx[on], np.broadcast_to(x[:, None], idx.shape)[on])
    bw /= cong[:, None]
    # a configuration that leaves some reduce-scatters on the compute queue from the start
    blocked = np.zeros((n, nb), dtype=bool)
    if rng.random() < HQ_SHARED_P:
        m = max(1, int(round(float(rng.uniform(*HQ_SHARED)) * nb)))
        blocked[:, rng.choice(nb, m, replace=False)] = True
    # the extra work: checkpoints, evaluations
    unit = 1.0 + fo
    rest, _ = _with_ckpt_eval(rng, t, np.zeros(n), rate, NODE_CKPT_EVERY, NODE_CKPT_ITERS,
                              NODE_CKPT_X, NODE_EVAL_EVERY, NODE_EVAL_X, unit=unit)
    q = _Queues(comp=comp, size=size, bw=bw, blocked=blocked, fwd=fo * rate, warm=np.ones(n),
                rest=rest)
    # planned restarts between parts: a warm-up, a downtime and new bucket sizes, kept where
    # the part's mean step rises by less than HQ_RESIZE_RISE (the resize halved until)
    restarted = np.zeros(k, dtype=bool)
    pauses: list[tuple[int, float]] = []
    for j in range(1, k):
        if rng.random() < NODE_RESTART_P:
            restarted[j] = True
            s0, s1 = int(starts[j]), ends[j]
            _moe_rewarm(q.warm, s0, _restart_warm(rng, *NODE_WARM))
            pauses.append((s0, _loguniform(rng, *NODE_DOWNTIME)))
            x_r = _loguniform(rng, *HQ_RESIZE)
            before = float(q.steps(s0, s1).mean())
            saved = size[s0:].copy()
            for _halving in range(4):
                size[s0:] = saved * x_r
                if float(q.steps(s0, s1).mean()) < (1.0 + HQ_RESIZE_RISE) * before:
                    break
                x_r = math.sqrt(x_r)
            else:
                size[s0:] = saved
    healthy_it = q.steps(0, n)
    steady = healthy_it[LEAD_ITERS:]
    mean = float(steady.mean())
    var = float(steady.var()) / mean ** 2
    it = healthy_it.copy()
    events: list[tuple[int, int, float, str]] = []
    kinds = [kd for kd, _ in HQ_KINDS]
    kind_p = np.array([p for _, p in HQ_KINDS])
    top = {"connections": 1.0, "order": 1.0, "bucket": HQ_GROW_MAX, "link": HQ_LINK_MAX}
    for j, lo_room, hi_room in _part_rooms(rng, scenario, starts, part, restarted, SPAN_MORE_P,
                                           SPAN_SETTLE, SPAN_CLEAR):
        for attempt in range(SPAN_TRIES):  # fresh draws until one is decidable
            kind = kinds[int(rng.choice(len(kinds), p=kind_p))]
            s = float(rng.uniform(*NODE_SLOWDOWN))
            ramp_share = float(rng.uniform(*HQ_RAMP)) if rng.random() < HQ_RAMP_P else 0.0
            need = SPAN_NEED_MARGIN * SPAN_DECIDABLE * var / s ** 2
            dur = max(_logint(rng, *NODE_SLOW_ITERS), math.ceil(need))
            how = (_restart_warm(rng, *NODE_WARM), _restart_warm(rng, *NODE_WARM))
            down = (_loguniform(rng, *NODE_DOWNTIME), _loguniform(rng, *NODE_DOWNTIME))
            grow = rng.permutation(nb)[:max(1, int(round(float(rng.uniform(*HQ_GROW)) * nb)))]
            perm = rng.permutation(nb)
            j0 = int(rng.integers(0, nb))
            if j == 0 and attempt == SPAN_TRIES - 1:  # the last try of a positive's first part:
                kind, ramp_share, dur = "link", 0.0, hi_room - lo_room  # its whole room
            restart = kind in ("connections", "order")  # a configuration or framework change
            if restart:
                ramp_share = 0.0
            ramp = max(1, min(HQ_RAMP_MAX, int(round(ramp_share * dur))))
            dur += (ramp - 1) // 2
            dur = max(1, min(dur, hi_room - lo_room))
            a = lo_room + int(rng.integers(0, hi_room - lo_room - dur + 1))
            b = a + dur
            who = {"connections": perm, "order": np.roll(np.arange(nb), -j0), "bucket": grow,
                   "link": np.zeros(0, dtype=np.int64)}[kind]
            sl0 = _QueueSlow(a, b, kind, 0.0, ramp, tuple(int(v) for v in who))
            # a configuration change comes with a restart at the span's start and another at
            # its end that restores the old one; the counterfactual healthy series has the
            # same restarts with the old configuration
            hw, base, y0 = q.warm, healthy_it, it
            if restart:
                hw, base, y0 = _restart_counterfactual(
                    q.warm, ((a, how[0]), (b, how[1])), lambda w: q.steps(0, n, warm=w), it,
                    events)

            def trial(g: float, sl_: _QueueSlow = sl0, hw_: np.ndarray = hw,
                      y0_: np.ndarray = y0) -> tuple[int, int, np.ndarray]:
                y = y0_.copy()
                y[sl_.a:sl_.b] = q.steps(sl_.a, sl_.b, _QueueSlow(sl_.a, sl_.b, sl_.kind, g,
                                                                  sl_.ramp, sl_.who), hw_)
                return _changed_span(y, y0_, sl_.a, sl_.b, faster=True)

            got = _visible_rise(_solve_rise(trial, 1.0, s, 0.0, top[kind], base=base,
                                            steps=SPAN_SOLVE_STEPS),
                                base, NODE_SLOWDOWN[0], s + SPAN_OVERSHOOT, NODE_SLOW_ITERS[0],
                                SPAN_DECIDABLE)
            if got is not None:
                lo, hi, it, r = got
                if restart:
                    q.warm = hw
                    healthy_it = base
                    pauses += [(a, down[0]), (b, down[1])]
                events.append((lo, hi, r, kind))
                break
    # labelled by the span's mean rise over its healthy mean
    return _restarted_timeline(base_s * healthy_it / mean, it / healthy_it, events, pauses)


@dataclass(frozen=True)
class _CompileSlow:
    """A slowdown of a :func:`_compile` series over steps ``[a, b)``: its kind, its size
    ``g``, the steps over which it climbs (1: a step), the shapes whose steps it slows
    (``eager`` / ``graph_break``) and the cost of a recompile (``thrash``, seconds over the
    series' unit)."""

    a: int
    b: int
    kind: str
    g: float
    ramp: int = 1
    who: tuple[int, ...] = ()
    stall: float = 0.0


@dataclass
class _Graphs:
    """The draws of a :func:`_compile` series (arrays ``(n,)`` unless said): each step's shape
    (its sequence-length bucket), the compiled compute of a batch of each shape ``(buckets,)``,
    the device's rate with the slowest rank's jitter, the host time, the batch's share (below
    1: an epoch's partial last batch), the evaluation steps, the cold compile of each graph
    ``(buckets + 2,)``: the shapes', the partial batch's and the evaluation's, in time units),
    the slowest rank's compile over a graph's own at each step, the dynamic graph's slowdown
    (0: static shapes), a cached compile's share of a cold one, the level, the restarts'
    warm-ups, the extra work (all-reduce, checkpoints, evaluations) and the segments: the
    job's start and every restart, each ``(step, cold)``."""

    bucket: np.ndarray
    cost: np.ndarray
    dev: np.ndarray
    host: np.ndarray
    batch: np.ndarray
    evals: np.ndarray
    cold: np.ndarray
    spread: np.ndarray
    dynamic: float
    cached: float
    level: np.ndarray
    warm: np.ndarray
    rest: np.ndarray
    cuts: tuple[tuple[int, bool], ...]

    def compiles(self, cuts: tuple[tuple[int, bool], ...]) -> tuple[np.ndarray, np.ndarray]:
        """The compile stall of every step and the slowdown of the graph it runs, under the
        segments ``cuts``: after each start the first batch of each shape compiles its graph
        (under dynamic shapes only the first two: the second compiles a dynamic graph that
        serves every later shape, slower), the first partial batch its own and the first
        evaluation the evaluation graph; cold, or from the on-disk cache (``cached`` of it)
        where a restart kept the shapes."""
        n, nb = self.bucket.size, self.cost.size
        stall = np.zeros(n)
        slow = np.ones(n)
        edges = sorted(cuts)
        for (s0, cold), (s1, _c) in zip(edges, [*edges[1:], (n, False)], strict=True):
            x = 1.0 if cold else self.cached
            bk = self.bucket[s0:s1]
            shapes, first = np.unique(bk, return_index=True)
            order = np.argsort(first)
            shapes, first = shapes[order], first[order]
            if self.dynamic > 0.0 and shapes.size > 1:
                slow[s0:s1] = np.where(bk != shapes[0], 1.0 + self.dynamic, 1.0)
                shapes, first = shapes[:2], first[:2]
            stall[s0 + first] += x * self.cold[shapes]
            for at, graph in ((np.flatnonzero(self.batch[s0:s1] < 1.0), nb),
                              (np.flatnonzero(self.evals[s0:s1]), nb + 1)):
                if at.size:
                    stall[s0 + int(at[0])] += x * self.cold[graph]
        return stall * self.spread, slow

    def steps(self, a: int, b: int, sl: _CompileSlow | None = None,
              warm: np.ndarray | None = None,
              cuts: tuple[tuple[int, bool], ...] | None = None) -> np.ndarray:
        """The step times over ``[a, b)`` under the slowdown ``sl`` (``warm`` / ``cuts``: the
        warm-ups and segments, else the series' own): ``eager`` / ``graph_break`` make the
        compute and host time of the steps of their shapes ``1 + g w`` times longer (``w``
        climbs linearly from 0 at ``a`` to 1 over ``ramp`` steps), ``thrash`` recompiles
        every ``1 / g`` steps (a guard that fails again and again)."""
        stall, slow = self.compiles(self.cuts if cuts is None else cuts)
        wu = (self.warm if warm is None else warm)[a:b]
        bk = self.bucket[a:b]
        busy = (self.cost[bk] * self.batch[a:b] * slow[a:b] * self.dev[a:b]
                + self.host[a:b]) * wu * self.level[a:b]
        extra = stall[a:b]
        if sl is not None:
            t = np.arange(a, b)
            inside = (t >= sl.a) & (t < sl.b)
            if sl.kind == "thrash":
                again = np.floor(sl.g * (t - sl.a + 1.0)) - np.floor(sl.g * (t - sl.a))
                extra = extra + np.where(inside, again * sl.stall * self.spread[a:b], 0.0)
            else:
                w = np.where(inside & np.isin(bk, sl.who),
                             np.minimum(1.0, (t - sl.a + 1.0) / sl.ramp), 0.0)
                busy = busy * (1.0 + sl.g * w)
        return np.asarray(busy + self.rest[a:b] + extra)


def _compile(rng: np.random.Generator, scenario: str) -> _Timeline:
    """torch.compile: recompilations, recompile thrash, graph breaks and eager fallback
    (module docstring); the corpus' noise is turned off (``noise_scale`` ~ 0)."""
    n = _n(rng)
    t = np.arange(n)
    base_s = _loguniform(rng, *BASE_S)
    ranks = int(rng.choice(NODE_RANKS))
    nb = int(rng.integers(CP_BUCKETS[0], CP_BUCKETS[1] + 1))
    k = int(rng.integers(1, 4))
    part = (n - LEAD_ITERS) // k
    starts = LEAD_ITERS + part * np.arange(k)
    rate = _wandering_compute(rng, t, *NODE_COMPUTE)
    # the shapes: bucket lengths doubling up to the longest, a fixed token budget per batch (only
    # the attention grows with the length), each step's bucket drawn by their frequencies
    cost = 1.0 + float(rng.uniform(*CP_ATTN)) * 2.0 ** (np.arange(nb) - (nb - 1.0))
    freq = rng.dirichlet(np.full(nb, CP_BUCKET_CONC))
    bucket = rng.choice(nb, n, p=freq)
    cost /= float(freq @ cost)
    rj = float(rng.uniform(*NODE_RANK_JITTER))
    dev = rate * np.exp(rj * rng.standard_normal((ranks, n))).max(axis=0)
    hj = float(rng.uniform(*CP_HOST_JITTER))
    host = float(rng.uniform(*CP_HOST)) * np.exp(hj * rng.standard_normal(n) - 0.5 * hj * hj)
    epoch = int(rng.integers(CP_EPOCH[0], CP_EPOCH[1] + 1))
    batch = np.ones(n)
    if rng.random() < CP_PARTIAL_P:  # drop_last off: a partial batch closes every epoch
        batch[t % epoch == epoch - 1] = float(rng.uniform(*CP_PARTIAL))
    # a graph's cold compile (mean steps), each rank's own: the step waits for the last
    cold = _loguniform(rng, *CP_COMPILE) * np.exp(CP_COMPILE_SPREAD
                                                  * rng.standard_normal(nb + 2))
    cold[nb + 1] *= float(rng.uniform(*CP_EVAL_COMPILE))
    cr = float(rng.uniform(*CP_COMPILE_RANK))
    spread = np.exp(cr * rng.standard_normal((ranks, n))).max(axis=0)
    dynamic = float(rng.uniform(*CP_DYNAMIC)) if rng.random() < CP_DYNAMIC_P else 0.0
    unit = 1.0 + float(host.mean())  # a compiled step's busy time
    rest = _comm_rest(rng, n, CP_COMM, CP_COMM_JITTER)
    rest, evals = _with_ckpt_eval(rng, t, rest, rate, NODE_CKPT_EVERY, NODE_CKPT_ITERS, NODE_CKPT_X,
                                  NODE_EVAL_EVERY, NODE_EVAL_X, unit=unit)
    gr = _Graphs(bucket=bucket, cost=cost, dev=dev, host=host, batch=batch, evals=evals,
                 cold=cold * unit, spread=spread, dynamic=dynamic,
                 cached=float(rng.uniform(*CP_CACHED)), level=np.ones(n), warm=np.ones(n),
                 rest=rest, cuts=((0, True),))
    # planned restarts between parts: a downtime, a warm-up, every graph compiled again (from
    # the on-disk cache, or cold with a new micro-batch count that moves the level)
    restarted = np.zeros(k, dtype=bool)
    pauses: list[tuple[int, float]] = []
    for j in range(1, k):
        if rng.random() < NODE_RESTART_P:
            restarted[j] = True
            s0 = int(starts[j])
            _moe_rewarm(gr.warm, s0, _restart_warm(rng, *NODE_WARM))
            pauses.append((s0, _loguniform(rng, *NODE_DOWNTIME)))
            reshape = bool(rng.random() < CP_RESHAPE_P)
            x_l = float(rng.uniform(*CP_RESHAPE_LEVEL))
            if reshape:
                gr.level[s0:] *= x_l
            gr.cuts += ((s0, reshape),)
    healthy_it = gr.steps(0, n)
    stall0 = gr.compiles(gr.cuts)[0][LEAD_ITERS:]
    steady = healthy_it[LEAD_ITERS:]
    mean = float(steady.mean())
    calm = steady[stall0 == 0.0]  # the spread of the steps that do not compile
    var = float(calm.var()) / float(calm.mean()) ** 2
    it = healthy_it.copy()
    events: list[tuple[int, int, float, str]] = []
    kinds = [kd for kd, _ in CP_KINDS]
    kind_p = np.array([p for _, p in CP_KINDS])
    top = {"eager": CP_EAGER_MAX, "thrash": CP_THRASH_MAX, "graph_break": CP_BREAK_MAX}
    for j, lo_room, hi_room in _part_rooms(rng, scenario, starts, part, restarted, SPAN_MORE_P,
                                           SPAN_SETTLE, SPAN_CLEAR):
        for attempt in range(SPAN_TRIES):  # fresh draws until one is decidable
            kind = kinds[int(rng.choice(len(kinds), p=kind_p))]
            s = float(rng.uniform(*NODE_SLOWDOWN))
            ramp_share = float(rng.uniform(*CP_RAMP)) if rng.random() < CP_RAMP_P else 0.0
            stall = _loguniform(rng, *CP_THRASH_STALL)
            # a recompile of ``stall`` every stall / s steps: the span's variance over the rise
            # squared is about that period
            need = SPAN_NEED_MARGIN * SPAN_DECIDABLE * (var / s ** 2
                                                    + (stall / s if kind == "thrash" else 0.0))
            dur = max(_logint(rng, *NODE_SLOW_ITERS), math.ceil(need))
            how = (_restart_warm(rng, *NODE_WARM),
                   _restart_warm(rng, *NODE_WARM))
            down = (_loguniform(rng, *NODE_DOWNTIME), _loguniform(rng, *NODE_DOWNTIME))
            one = bool(rng.random() < CP_EAGER_ONE_P)
            shape = int(rng.choice(nb, p=freq))  # a shape as often as its batches
            if j == 0 and attempt == SPAN_TRIES - 1:  # the last try of a positive's first part:
                kind, one, dur = "eager", False, hi_room - lo_room  # every shape, its whole room,
                s = NODE_SLOWDOWN[1]  # the largest rise
            ramp = max(1, min(CP_RAMP_MAX, int(round(ramp_share * dur))))
            ramp = ramp if kind == "graph_break" else 1
            dur += (ramp - 1) // 2
            dur = max(1, min(dur, hi_room - lo_room))
            a = lo_room + int(rng.integers(0, hi_room - lo_room - dur + 1))
            b = a + dur
            # eager: one shape's graph (the one past the cache limit) or every one; a graph
            # break: the shapes from ``shape`` up (the longer batches take the broken path)
            who = {"eager": (shape,) if one else tuple(range(nb)),
                   "graph_break": tuple(range(shape, nb)), "thrash": ()}[kind]
            sl0 = _CompileSlow(a, b, kind, 0.0, ramp, who, stall * unit)
            # an eager fallback lasts until a restart; a graph break comes with a code change
            # at a restart (every graph compiled cold, in the healthy series too) and its fix
            # at another; the counterfactual healthy series has the same restarts
            at = {"eager": ((b, how[1], down[1]),),
                  "graph_break": ((a, how[0], down[0]), (b, how[1], down[1])),
                  "thrash": ()}[kind]
            cuts = gr.cuts + tuple((t0, t0 == a) for t0, _h, _d in at)
            hw, base, y0 = gr.warm, healthy_it, it
            if at:
                def whole(w: np.ndarray, c_: tuple[tuple[int, bool], ...] = cuts
                          ) -> np.ndarray:
                    return gr.steps(0, n, warm=w, cuts=c_)

                hw, base, y0 = _restart_counterfactual(
                    gr.warm, tuple((t0, h) for t0, h, _d in at), whole, it, events)

            def trial(g: float, sl_: _CompileSlow = sl0, hw_: np.ndarray = hw,
                      y0_: np.ndarray = y0, c_: tuple[tuple[int, bool], ...] = cuts
                      ) -> tuple[int, int, np.ndarray]:
                y = y0_.copy()
                y[sl_.a:sl_.b] = gr.steps(sl_.a, sl_.b, _CompileSlow(
                    sl_.a, sl_.b, sl_.kind, g, sl_.ramp, sl_.who, sl_.stall), hw_, c_)
                return _changed_span(y, y0_, sl_.a, sl_.b, faster=True)

            got = _visible_rise(_solve_rise(trial, 1.0, s, 0.0, top[kind], base=base,
                                            steps=SPAN_SOLVE_STEPS),
                                base, NODE_SLOWDOWN[0], s + SPAN_OVERSHOOT, NODE_SLOW_ITERS[0],
                                SPAN_DECIDABLE, after=not at)
            if got is not None:
                lo, hi, it, r = got
                if at:
                    gr.warm, gr.cuts = hw, cuts
                    healthy_it = base
                    pauses += [(t0, d) for t0, _h, d in at]
                events.append((lo, hi, r, kind))
                break
    # labelled by the span's mean rise over its healthy mean
    return _restarted_timeline(base_s * healthy_it / mean, it / healthy_it, events, pauses)


@dataclass(frozen=True)
class _NodeSlow:
    """A slowdown of a family of ranks on nodes (:func:`_power`, :func:`_numa`,
    :func:`_rollout`, :func:`_fabric`, :func:`_nvme`, :func:`_observe`, :func:`_wan`, whose
    nodes are its sites, :func:`_pcie`, whose are its ranks or switches, :func:`_steal`, whose
    are its VMs) over steps ``[a, b)``: its kind, its size ``g``, the steps over which it
    climbs (1: a step), its node (-1: every node; an index into its kind's rank sets,
    :func:`_node_slowdowns`) and its aim (uniform in [0, 1): which of the node's parts it hits,
    e.g. a link, or how many tenants arrive, where the family's plan draws one)."""

    a: int
    b: int
    kind: str
    g: float
    ramp: int = 1
    node: int = -1
    aim: float = 0.0

    def rows(self) -> slice:
        """The rows of its node (every row: every node) in a ``(nodes, n)`` array."""
        return slice(None) if self.node < 0 else slice(self.node, self.node + 1)

    def weight(self) -> np.ndarray:
        """Its weight over the span: climbing linearly from 0 at ``a`` to 1 over ``ramp``
        steps."""
        return np.minimum(1.0, (np.arange(self.b - self.a) + 1.0) / self.ramp)


@dataclass
class _Nodes:
    """The draws of a :func:`_power` series (arrays ``(ranks, n)`` or ``(nodes, n)`` or
    ``(n,)``): each rank's node, its compute at the device's rate and its host time, the
    clock-bound (heavy) share of the compute, each node's draw in its heavy block at full
    clock over its cap and the factor of its clock-bound time (the bin, the temperature), the
    share of each heavy block that runs under the controller's throttle where the draw
    exceeds the cap (from the controller's phase), the power model (static share, exponent),
    the level, the restarts' warm-ups and the extra work (checkpoints, evaluations)."""

    node: np.ndarray
    dev: np.ndarray
    host: np.ndarray
    heavy: float
    draw: np.ndarray
    clock: np.ndarray
    bound: np.ndarray
    static: float
    kappa: float
    level: np.ndarray
    warm: np.ndarray
    rest: np.ndarray

    def throttle(self, draw: np.ndarray, cap: np.ndarray) -> np.ndarray:
        """The heavy block's time over its unthrottled time, per node and step: while the
        draw exceeds the cap the controller sets the clock ``f`` at which ``static + (1 -
        static) f^kappa`` of the draw meets it (at least :data:`PW_MIN_CLOCK`), over the
        ``bound`` share of the block (the rest runs at full clock)."""
        ratio = np.minimum(1.0, cap / draw)
        f = np.maximum(PW_MIN_CLOCK, (np.maximum(ratio - self.static, 0.0)
                                      / (1.0 - self.static)) ** (1.0 / self.kappa))
        return np.asarray(1.0 + self.bound * (1.0 / f - 1.0))

    def busy(self, slow: tuple[_NodeSlow, ...] = (), warm: np.ndarray | None = None
             ) -> np.ndarray:
        """Each rank's busy time (compute and host, plus the extra work) per step under the
        slowdowns ``slow`` (``warm``: the warm-ups, else the series' own): ``demand`` /
        ``psu`` divide the node's cap by ``1 + g w``, ``config`` / ``cooling`` multiply the
        draw by it (``w`` climbs linearly from 0 at ``a`` to 1 over ``ramp`` steps)."""
        draw, cap = self.draw.copy(), np.ones(self.draw.shape)
        for sl in slow:
            x = 1.0 + sl.g * sl.weight()
            if sl.kind in ("demand", "psu"):
                cap[sl.rows(), sl.a:sl.b] /= x
            else:
                draw[sl.rows(), sl.a:sl.b] *= x
        hv = (self.clock * self.throttle(draw, cap))[self.node]
        wu = (self.warm if warm is None else warm) * self.level
        return np.asarray((self.dev * (self.heavy * hv + 1.0 - self.heavy) + self.host) * wu
                          + self.rest)


@dataclass(frozen=True)
class _RankedJob:
    """The draws a job of data-parallel ranks on nodes starts with (:func:`_ranked_job`;
    arrays ``(ranks, n)`` or ``(n,)``): its steps, its step time in seconds, each rank's node,
    the parts the series is cut in (``k`` of ``part`` steps from ``starts``), the device's
    rate, each rank's compute at that rate and its host time."""

    n: int
    t: np.ndarray
    base_s: float
    ranks: int
    nodes: int
    node: np.ndarray
    k: int
    part: int
    starts: np.ndarray
    rate: np.ndarray
    dev: np.ndarray
    host: np.ndarray

    def groups(self) -> tuple[np.ndarray, ...]:
        """The ranks of each node (the rank sets a slowdown names)."""
        return tuple(np.flatnonzero(self.node == j) for j in range(self.nodes))


def _ranked_job(rng: np.random.Generator, ranks_of: tuple[int, ...], node_of: tuple[int, ...],
                compute: tuple[tuple[float, float], ...], rank_jitter: tuple[float, float],
                host: tuple[float, float], host_jitter: tuple[float, float],
                min_nodes: int = 1) -> _RankedJob:
    """A job of ``ranks_of`` ranks on nodes of ``node_of`` (at most the ranks over
    ``min_nodes``), cut in 1-3 parts after the lead; the device's rate from
    :func:`_wandering_compute` (``compute``: its six ranges), each rank's compute at it with
    its own jitter (``rank_jitter``, log space), each rank's host time a share ``host`` of it
    with a log-normal jitter (``host_jitter``, mean 1).  Shared by :func:`_power`,
    :func:`_numa`, :func:`_rollout`, :func:`_fabric`, :func:`_nvme`, :func:`_observe`,
    :func:`_wan`, :func:`_pcie` and :func:`_steal` (the draws in this order)."""
    n = _n(rng)
    t = np.arange(n)
    base_s = _loguniform(rng, *BASE_S)
    ranks = int(rng.choice(ranks_of))
    m = min(ranks // min_nodes, int(rng.choice(node_of)))
    k = int(rng.integers(1, 4))
    part = (n - LEAD_ITERS) // k
    rate = _wandering_compute(rng, t, *compute)
    rj = float(rng.uniform(*rank_jitter))
    dev = rate[None, :] * np.exp(rj * rng.standard_normal((ranks, n)))
    hj = float(rng.uniform(*host_jitter))
    hs = float(rng.uniform(*host))
    return _RankedJob(n=n, t=t, base_s=base_s, ranks=ranks, nodes=-(-ranks // m),
                      node=np.arange(ranks) // m, k=k, part=part,
                      starts=LEAD_ITERS + part * np.arange(k), rate=rate, dev=dev,
                      host=hs * np.exp(hj * rng.standard_normal((ranks, n)) - 0.5 * hj * hj))


def _planned_restarts(rng: np.random.Generator, job: _RankedJob, warm: np.ndarray,
                      level: np.ndarray, restart_p: float,
                      how: tuple[tuple[float, float], tuple[float, float], tuple[float, float]],
                      downtime: tuple[float, float], level_x: tuple[float, float],
                      then: Callable[[int], None] | None = None
                      ) -> tuple[np.ndarray, list[tuple[int, float]]]:
    """Planned restarts between the parts of ``job`` (each with chance ``restart_p``): a
    warm-up (``how``: the first step's factor, the hump's amplitude and time constant) into
    ``warm``, a downtime (``downtime`` seconds), the level from there ``level_x`` times
    (``level``, in place) and ``then(step)`` (a family's own change at the restart).  Returns
    which parts begin with a restart and the ``(step, seconds)`` of each.  Shared by
    :func:`_power`, :func:`_numa` and :func:`_rollout`."""
    restarted = np.zeros(job.k, dtype=bool)
    pauses: list[tuple[int, float]] = []
    for j in range(1, job.k):
        if rng.random() < restart_p:
            restarted[j] = True
            s0 = int(job.starts[j])
            _moe_rewarm(warm, s0, _restart_warm(rng, *how))
            pauses.append((s0, _loguniform(rng, *downtime)))
            level[s0:] *= float(rng.uniform(*level_x))
            if then is not None:
                then(s0)
    return restarted, pauses


def _node_ckpt_eval(rng: np.random.Generator, t: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """The checkpoints and evaluations of a family of ranks on nodes (the ``NODE_*``
    schedule; :func:`_with_ckpt_eval`): the seconds they add to each step."""
    return _node_ckpt_eval_at(rng, t, rate)[0]


def _node_ckpt_eval_at(rng: np.random.Generator, t: np.ndarray, rate: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_node_ckpt_eval` and which steps evaluate."""
    return _with_ckpt_eval(rng, t, np.zeros(t.size), rate, NODE_CKPT_EVERY, NODE_CKPT_ITERS,
                           NODE_CKPT_X, NODE_EVAL_EVERY, NODE_EVAL_X)


@dataclass(frozen=True)
class _NodePlan:
    """How the slowdowns of a family of ranks on nodes are drawn (:func:`_node_slowdowns`):
    the kinds and their chances, each kind's largest size, the kinds that come with a restart
    at the span's start and / or end (``"a"``, ``"b"``, ``"ab"``), those that slow every node,
    those that climb (over ``climb`` of the span), the first part's last try (that kind over
    the part's whole room at the smallest rise, or at ``last_rise``), whether a slowdown draws
    its aim (:class:`_NodeSlow`), whether each rank it names must rise by half its rise at
    least (``each_rank``: else it is drawn again; where the ranks of a set differ, e.g. a PCIe
    switch's two GPUs, one with its link already trained down), the family's ranges (the
    climb, a restart's warm-up; rises, spans and a restart's downtime the ``NODE_*``
    schedule's) and the rule every such family shares (the ``SPAN_*`` constants:
    decidability, tries, overshoot, bisection steps, the chance of a slowdown in a later
    part, the steps clear of restarts)."""

    kinds: tuple[tuple[str, float], ...]
    top: tuple[tuple[str, float], ...]
    restarts: tuple[tuple[str, str], ...]
    every: tuple[str, ...]
    climbing: tuple[str, ...]
    last: str
    climb: tuple[float, float]
    aimed: bool = False
    last_rise: float | None = None
    each_rank: bool = False
    warm: tuple[tuple[float, float], tuple[float, float], tuple[float, float]] = NODE_WARM
    slowdown: tuple[float, float] = NODE_SLOWDOWN
    slow_iters: tuple[int, int] = NODE_SLOW_ITERS
    downtime: tuple[float, float] = NODE_DOWNTIME
    need_margin: float = SPAN_NEED_MARGIN
    decidable: float = SPAN_DECIDABLE
    tries: int = SPAN_TRIES
    overshoot: float = SPAN_OVERSHOOT
    solve_steps: int = SPAN_SOLVE_STEPS
    more_p: float = SPAN_MORE_P
    settle: int = SPAN_SETTLE
    clear: int = SPAN_CLEAR


@dataclass
class _Resumed:
    """Slowdowns labelled at planned restarts (a restart that resumes slower, :func:`_fabric`),
    decided before the other slowdowns are drawn: the parts they take (no other slowdown is
    drawn there), the slowdowns, their events ``(start, end, rise, kind)`` and the ranks each
    names."""

    taken: np.ndarray
    slow: tuple[_NodeSlow, ...] = ()
    events: list[tuple[int, int, float, str]] = field(default_factory=list)
    who: list[tuple[int, ...]] = field(default_factory=list)


def _node_slowdowns(rng: np.random.Generator, scenario: str, job: _RankedJob,
                    restarted: np.ndarray, warm: np.ndarray,
                    busy: Callable[[tuple[_NodeSlow, ...], np.ndarray], np.ndarray],
                    var: float, plan: _NodePlan, pauses: list[tuple[int, float]],
                    given: _Resumed | None = None,
                    groups: tuple[np.ndarray, ...] | None = None,
                    kind_groups: dict[str, tuple[np.ndarray, ...]] | None = None
                    ) -> tuple[tuple[_NodeSlow, ...], list[tuple[int, int, float, str]],
                               list[tuple[int, ...]], np.ndarray]:
    """The slowdowns of a family of ranks on nodes (:func:`_power`, :func:`_numa`,
    :func:`_rollout`, whose "nodes" are its generation workers; :func:`_observe`, whose one
    "node" is its observer ranks): one in each part :func:`_part_rooms` gives, each raising
    the mean busy time of its node's ranks (``groups``: the rank sets a slowdown may name,
    else the job's nodes; ``kind_groups``: a kind's own rank sets, where they are not those;
    a slowdown's ``node`` indexes its kind's sets; every rank's where its kind slows every
    node) over its span by a rise drawn in
    ``plan.slowdown``, its size ``g`` solved by bisection (``busy(slowdowns, warm-ups)``: each
    rank's busy time), the span drawn at least ``need_margin x decidable x var / rise^2``
    long, drawn again (at most ``plan.tries`` times) until it is decidable and visible
    (:func:`_visible_rise`; before it only where a restart follows).  A slowdown that comes
    with restarts adds them (their warm-ups, and their downtimes to ``pauses``, in place);
    the counterfactual healthy busy time has them too.  Slowdowns ``given`` at restarts come
    first, and no other is drawn in the parts they take.  Returns the slowdowns, the events
    ``(start, end, rise, kind)``, the ranks each names and the warm-ups."""
    slow: tuple[_NodeSlow, ...] = () if given is None else given.slow
    events: list[tuple[int, int, float, str]] = [] if given is None else list(given.events)
    who_of: list[tuple[int, ...]] = [] if given is None else list(given.who)
    groups = job.groups() if groups is None else groups
    kinds = [kd for kd, _ in plan.kinds]
    kind_p = np.array([p for _, p in plan.kinds])
    top, edges = dict(plan.top), dict(plan.restarts)
    for j, lo_room, hi_room in _part_rooms(rng, scenario, job.starts, job.part, restarted,
                                           plan.more_p, plan.settle, plan.clear):
        if given is not None and given.taken[j]:
            continue
        for attempt in range(plan.tries):  # fresh draws until one is decidable
            kind = kinds[int(rng.choice(len(kinds), p=kind_p))]
            s = float(rng.uniform(*plan.slowdown))
            climb = float(rng.uniform(*plan.climb))
            need = plan.need_margin * plan.decidable * var / s ** 2
            dur = max(_logint(rng, *plan.slow_iters), math.ceil(need))
            how = (_restart_warm(rng, *plan.warm), _restart_warm(rng, *plan.warm))
            down = (_loguniform(rng, *plan.downtime), _loguniform(rng, *plan.downtime))
            nd = int(rng.integers(0, len(_kind_groups(kind, groups, kind_groups))))
            aim = float(rng.random()) if plan.aimed else 0.0
            if j == 0 and attempt == plan.tries - 1:  # the last try of a positive's first part:
                kind, dur = plan.last, hi_room - lo_room  # over its whole room,
                # the smallest rise (or the plan's)
                s = plan.slowdown[0] if plan.last_rise is None else plan.last_rise
            dur = max(1, min(dur, hi_room - lo_room))
            a = lo_room + int(rng.integers(0, hi_room - lo_room - dur + 1))
            b = a + dur
            ramp = max(1, int(round(climb * dur))) if kind in plan.climbing else 1
            sets = _kind_groups(kind, groups, kind_groups)
            nd = -1 if kind in plan.every else nd % len(sets)
            who = sets[nd] if nd >= 0 else np.arange(job.ranks)
            # a slowdown that comes with a restart, or ends with one; the counterfactual
            # healthy series has the same restarts
            at = tuple(r for e, r in (("a", (a, how[0], down[0])), ("b", (b, how[1], down[1])))
                       if e in edges.get(kind, ""))
            hw = warm.copy()
            for t0, h, _d in at:
                _moe_rewarm(hw, t0, h)
            base = busy((), hw)[who].mean(axis=0)
            y0 = busy(slow, hw)[who].mean(axis=0)

            def trial(g: float, sl_: _NodeSlow = _NodeSlow(a, b, kind, 0.0, ramp, nd, aim),
                      prev: tuple[_NodeSlow, ...] = slow, hw_: np.ndarray = hw,
                      who_: np.ndarray = who, y0_: np.ndarray = y0
                      ) -> tuple[int, int, np.ndarray]:
                sl = _NodeSlow(sl_.a, sl_.b, sl_.kind, g, sl_.ramp, sl_.node, sl_.aim)
                return _changed_span(busy((*prev, sl), hw_)[who_].mean(axis=0), y0_, sl.a,
                                     sl.b)

            found = _solve_rise(trial, 1.0, s, 0.0, top[kind], base=base,
                                steps=plan.solve_steps)
            got = _visible_rise(found, base, plan.slowdown[0], s + plan.overshoot,
                                plan.slow_iters[0], plan.decidable, after=not at)
            if found is not None and got is not None and plan.each_rank:
                sl_ = _NodeSlow(a, b, kind, found[3], ramp, nd, aim)
                lo, hi = got[0], got[1]
                ratio = (busy((*slow, sl_), hw)[who, lo:hi].mean(axis=1)
                         / busy((), hw)[who, lo:hi].mean(axis=1))
                got = got if float(ratio.min()) > 1.0 + 0.5 * got[3] else None
            if found is not None and got is not None:
                lo, hi, _y, r = got
                slow += (_NodeSlow(a, b, kind, found[3], ramp, nd, aim),)
                if at:
                    warm = hw
                    pauses += [(t0, d) for t0, _h, d in at]
                events.append((lo, hi, r, kind))
                who_of.append(tuple(int(v) for v in who))
                break
    return slow, events, who_of, warm


_POWER_PLAN = _NodePlan(
    kinds=PW_KINDS, top=(("demand", PW_CAP_MAX), ("psu", PW_CAP_MAX), ("config", PW_DRAW_MAX),
                         ("cooling", PW_HEAT_MAX)),
    restarts=(("psu", "b"), ("config", "ab")), every=("config",), climbing=("cooling",),
    last="demand", climb=PW_CLIMB)


class _NodeState(Protocol):
    """What :func:`_node_timeline` needs of a family's per-rank state: the warm-ups, the
    level (another batch or worker count after a restart) and the busy time under
    slowdowns."""

    warm: np.ndarray
    level: np.ndarray

    def busy(self, slow: tuple[_NodeSlow, ...] = (), warm: np.ndarray | None = None
             ) -> np.ndarray: ...


def _node_timeline(rng: np.random.Generator, scenario: str, job: _RankedJob, st: _NodeState,
                   plan: _NodePlan, level_x: tuple[float, float],
                   then: Callable[[int], None] | None = None,
                   resumed: Callable[[np.ndarray], _Resumed] | None = None,
                   groups: tuple[np.ndarray, ...] | None = None,
                   kind_groups: dict[str, tuple[np.ndarray, ...]] | None = None) -> _Timeline:
    """The end every family of ranks on nodes shares: planned restarts between the parts
    (``NODE_RESTART_P``, the plan's warm-up and downtime, the level ``level_x``; ``then``
    at each; ``resumed(restarted)``: the slowdowns labelled at them, after they are all
    placed), the slowdowns (:func:`_node_slowdowns`; ``groups``: the rank sets a slowdown
    may name, else the job's nodes; ``kind_groups``: a kind's own, where they are not those)
    and the timeline of each rank's busy time, labelled by the span's mean rise of the named
    ranks over their healthy mean."""
    restarted, pauses = _planned_restarts(rng, job, st.warm, st.level, NODE_RESTART_P,
                                          plan.warm, plan.downtime, level_x, then)
    given = None if resumed is None else resumed(restarted)
    groups = job.groups() if groups is None else groups
    every_set = groups + tuple(g for sets in (kind_groups or {}).values() for g in sets)
    mean, var = _node_var(st.busy(), every_set)
    slow, events, who_of, st.warm = _node_slowdowns(rng, scenario, job, restarted, st.warm,
                                                    st.busy, var, plan, pauses, given, groups,
                                                    kind_groups)
    healthy = st.busy()
    return _restarted_timeline(job.base_s * healthy / mean, st.busy(slow) / healthy, events,
                               pauses, who_of)


def _kind_groups(kind: str, groups: tuple[np.ndarray, ...],
                 kind_groups: dict[str, tuple[np.ndarray, ...]] | None
                 ) -> tuple[np.ndarray, ...]:
    """The rank sets a slowdown of ``kind`` may name: its own in ``kind_groups``, else
    ``groups``."""
    return groups if kind_groups is None else kind_groups.get(kind, groups)


def _node_var(healthy: np.ndarray, groups: tuple[np.ndarray, ...]) -> tuple[float, float]:
    """The healthy mean busy time after the lead and the largest variance, over the rank sets
    ``groups`` (the nodes), of a set's mean busy time over that mean squared."""
    steady = healthy[:, LEAD_ITERS:]
    mean = float(steady.mean())
    return mean, max(float(steady[g].mean(axis=0).var()) for g in groups) / mean ** 2


def _power(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Node power capping (module docstring): each rank's busy time, the ranks of a node
    capped together; the corpus' noise is turned off (``noise_scale`` ~ 0)."""
    job = _ranked_job(rng, NODE_RANKS, PW_NODE, NODE_COMPUTE, NODE_RANK_JITTER, PW_HOST,
                      PW_HOST_JITTER)
    n, t, nodes, rate, dev = job.n, job.t, job.nodes, job.rate, job.dev
    rest = _node_ckpt_eval(rng, t, rate)
    heavy = float(rng.uniform(*PW_HEAVY))
    # the heavy block's draw over the cap: near it, each node's own, jitter, heavier batches
    dj = float(rng.uniform(*PW_DRAW_JITTER))
    draw = (float(rng.uniform(*PW_DRAW)) * np.exp(PW_DRAW_NODE * rng.standard_normal(nodes))
            [:, None] * np.exp(dj * rng.standard_normal((nodes, n))))
    hit = rng.random((nodes, n)) < rng.uniform(*PW_HEAVY_STEP_P)
    draw[hit] *= rng.uniform(*PW_HEAVY_STEP_X, int(hit.sum()))
    clock = np.ones((nodes, n))
    if rng.random() < PW_BIN_P:  # a node of a slower bin from the start
        clock[int(rng.integers(0, nodes))] *= 1.0 + float(rng.uniform(*PW_BIN))
    # the job's clock (seconds, unthrottled) and the inlet temperature's wave
    unit = np.asarray((dev * (1.0 + job.host.mean()) + rest).max(axis=0))
    sec = job.base_s / float(unit[LEAD_ITERS:].mean())
    start_s = np.concatenate([[0.0], np.cumsum(unit)[:-1]]) * sec
    wave = np.sin(2.0 * math.pi * start_s / _loguniform(rng, *PW_WAVE_S)
                  + rng.uniform(0.0, 2.0 * math.pi)) * float(rng.uniform(*PW_WAVE))
    clock *= 1.0 + wave[None, :]
    draw *= 1.0 + float(rng.uniform(*PW_LEAK)) * wave[None, :]
    # the controller (each node's own phase) decides at each tick from the draw it sees: at a
    # heavy block's start the throttle is on where its last tick fell in a heavy block (the
    # steps repeat: its place in the step's cycle), else it comes on at the next tick
    tick = _loguniform(rng, *PW_TICK_S)
    cycle = unit * sec
    block = heavy * rate * sec  # the heavy block closes the step, after the light work
    light = cycle - block
    phase = (start_s + light)[None, :] / tick + rng.random((nodes, 1))
    since = tick * (phase - np.floor(phase))  # the time since the last tick
    on = np.mod(light[None, :] - since, cycle[None, :]) >= light[None, :]
    bound = np.where(on, 1.0, np.clip(1.0 - (tick - since) / block[None, :], 0.0, 1.0))
    pw = _Nodes(node=job.node, dev=dev, host=job.host, heavy=heavy, draw=draw, clock=clock,
                bound=bound, static=float(rng.uniform(*PW_STATIC)),
                kappa=float(rng.uniform(*PW_KAPPA)), level=np.ones(n), warm=np.ones(n),
                rest=rest)
    # planned restarts between parts (another batch: a level); each rank's busy time,
    # labelled by the span's mean rise of its node's ranks (every rank's for a configuration
    # change) over their healthy mean
    return _node_timeline(rng, scenario, job, pw, _POWER_PLAN, PW_RESHAPE_LEVEL)


@dataclass
class _Sockets:
    """The draws of a :func:`_numa` series (arrays ``(ranks, n)`` or ``(nodes, n)`` or
    ``(n,)``): each rank's node, its compute at the device's rate, its host work on the step's
    path, its exposed host-to-device copies, its loader's time per batch, its healthy stalls
    (housekeeping, compaction), the training's CPU demand over a node's cores, the automatic
    NUMA balancing's bursts (each step's key and the host work's slowdown in a burst, per
    node), the level, the restarts' warm-ups and the extra work (checkpoints, evaluations)."""

    node: np.ndarray
    dev: np.ndarray
    host: np.ndarray
    copy: np.ndarray
    feed: np.ndarray
    stall: np.ndarray
    demand: float
    key: np.ndarray
    burst: np.ndarray
    level: np.ndarray
    warm: np.ndarray
    rest: np.ndarray

    def busy(self, slow: tuple[_NodeSlow, ...] = (), warm: np.ndarray | None = None
             ) -> np.ndarray:
        """Each rank's busy time per step under the slowdowns ``slow`` (``warm``: the warm-ups,
        else the series' own): the compute plus the host work and the copies, or the loader's
        time per batch where it is longer (a batch is ready no sooner), plus the stalls.  On
        the slowdown's node (every node: ``node`` -1), with ``w`` climbing linearly from 0 at
        ``a`` to 1 over ``ramp`` steps: ``affinity`` (the processes float across sockets:
        the CPU work, host work and loader, reads remote memory and the copies cross the
        inter-socket link, both ``1 + g w`` times), ``governor`` (the CPU's clock lower: the
        CPU work ``1 + g w`` times, the DMA copies not), ``cojob`` (a CPU job whose demand is
        ``g w`` times the node's cores: the CPU work time-sliced, ``max(1, demand + g w)``
        times, and ``1 + NU_MEMBW min(1, g w)`` for the caches and the memory bandwidth) and
        ``balancing`` (pages migrated in bursts: a step whose key is below ``g w`` is in a
        burst, its CPU work and copies ``1 + burst`` times)."""
        nodes, n = self.key.shape
        cpu, cx = np.ones((nodes, n)), np.ones((nodes, n))
        for sl in slow:
            rows, span, w = sl.rows(), slice(sl.a, sl.b), sl.weight()
            if sl.kind == "cojob":
                load = sl.g * w
                cpu[rows, span] *= (np.maximum(1.0, self.demand + load)
                                    * (1.0 + NU_MEMBW * np.minimum(1.0, load)))
                continue
            x = 1.0 + sl.g * w
            if sl.kind == "balancing":
                x = 1.0 + self.burst[rows, span] * (self.key[rows, span] < sl.g * w)
            cpu[rows, span] *= x
            if sl.kind != "governor":
                cx[rows, span] *= x
        c, k = cpu[self.node], cx[self.node]
        wu = (self.warm if warm is None else warm) * self.level
        work = np.maximum(self.dev + self.host * c + self.copy * k, self.feed * c)
        return np.asarray((work + self.stall) * wu + self.rest)


_NUMA_PLAN = _NodePlan(
    kinds=NU_KINDS, top=(("affinity", NU_REMOTE_MAX), ("balancing", 1.0),
                         ("governor", NU_CLOCK_MAX), ("cojob", NU_COJOB_MAX)),
    restarts=(("affinity", "ab"), ("governor", "ab")), every=("governor",),
    climbing=("balancing",), last="cojob", climb=NU_CLIMB)


def _stalls(rng: np.random.Generator, shape: tuple[int, ...], chance: tuple[float, float],
            size: tuple[float, float]) -> np.ndarray:
    """Stalls that hit each entry with a chance drawn in ``chance``, each of a size
    log-uniform in ``size``; 0 elsewhere."""
    hit = rng.random(shape) < rng.uniform(*chance)
    out = np.zeros(shape)
    out[hit] = _loguniforms(rng, *size, int(hit.sum()))
    return out


def _keyed_runs(rng: np.random.Generator, nodes: int, n: int, steps: tuple[int, int],
                size: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Each node's steps cut in runs of ``steps`` steps (log-uniform), each run with its key
    (uniform: a run is a burst where its key is below the rate) and the slowdown in it
    (``size``, log-uniform): ``(key, burst)``, ``(nodes, n)``.  NUMA balancing's page
    migration bursts (:func:`_numa`, :data:`NU_BURST`), a reward server's episodes
    (:func:`_rollout`, :data:`RO_EPISODE`), a PCIe switch's neighbour's (:func:`_pcie`,
    :data:`PC_EPISODE`), a VM's co-tenants' tenancies and a neighbour's episodes
    (:func:`_steal`, :data:`ST_TENANCY`, :data:`ST_EPISODE`)."""
    runs = n // steps[0] + 1
    length = np.rint(_loguniforms(rng, *steps, (nodes, runs))).astype(np.int64)
    u = rng.random((nodes, runs))
    x = _loguniforms(rng, *size, (nodes, runs))
    run = np.array([np.repeat(np.arange(runs), length[j])[:n] for j in range(nodes)])
    return np.take_along_axis(u, run, axis=1), np.take_along_axis(x, run, axis=1)


def _numa(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Host CPU placement (module docstring): each rank's busy time, the ranks of a node slowed
    together; the corpus' noise is turned off (``noise_scale`` ~ 0)."""
    job = _ranked_job(rng, NODE_RANKS, NU_NODE, NODE_COMPUTE, NODE_RANK_JITTER, NU_HOST,
                      NU_HOST_JITTER)
    n, t, ranks, nodes = job.n, job.t, job.ranks, job.nodes
    m = int(np.count_nonzero(job.node == 0))
    rest = _node_ckpt_eval(rng, t, job.rate)
    host = job.host.copy()
    cj = float(rng.uniform(*NU_COPY_JITTER))
    copy = float(rng.uniform(*NU_COPY)) * np.exp(cj * rng.standard_normal((ranks, n))
                                                 - 0.5 * cj * cj)
    if rng.random() < NU_LOG_P:  # rank 0 owns the logging / checkpoint thread
        host[0] *= float(rng.uniform(*NU_LOG))
    unit = float((job.dev + host + copy)[:, LEAD_ITERS:].mean())  # the mean busy time
    # shared-node activity (each node's own phase): the host work +-amp, a few % of the step
    start_s = t * job.base_s
    amp = min(float(rng.uniform(*NU_WAVE)), NU_WAVE_STEP * unit / float(host.mean()))
    wave = np.sin(2.0 * math.pi * start_s[None, :] / _loguniform(rng, *NU_WAVE_S)
                  + rng.uniform(0.0, 2.0 * math.pi, (nodes, 1)))
    host *= 1.0 + amp * wave[job.node]
    # the loader: its workers' CPU time per batch over their count, below the step
    rho = float(rng.uniform(*NU_FEED))
    fj = float(rng.uniform(*NU_FEED_JITTER))
    feed = rho * unit * np.exp(fj * rng.standard_normal((ranks, n)) - 0.5 * fj * fj)
    cores = int(rng.choice(NU_CORES))
    workers = int(rng.integers(NU_WORKERS[0], NU_WORKERS[1] + 1))
    workers = max(1, min(workers, int((NU_FIT * cores / m - NU_THREADS) / rho)))
    busy_cpu = rho * workers  # the workers' cores of CPU demand per rank (kept at a restart)
    stall = unit * (_stalls(rng, (ranks, n), NU_KEEP_P, NU_KEEP)
                    + _stalls(rng, (ranks, n), NU_THP_P, NU_THP))
    key, burst = _keyed_runs(rng, nodes, n, NU_BURST, NU_BURST_X)
    sk = _Sockets(node=job.node, dev=job.dev, host=host, copy=copy, feed=feed, stall=stall,
                  demand=m * (NU_THREADS + busy_cpu) / cores, key=key, burst=burst,
                  level=np.ones(n), warm=np.ones(n), rest=rest)
    now = [workers]

    def rework(s0: int) -> None:  # another worker count: the loader's time per batch with it
        new = max(int(rng.integers(NU_WORKERS[0], NU_WORKERS[1] + 1)),
                  math.ceil(busy_cpu / NU_FEED[1]))
        sk.feed[:, s0:] *= now[0] / new
        now[0] = new

    # planned restarts between parts (another worker count: a level); each rank's busy
    # time, labelled by the span's mean rise of its node's ranks (every rank's for a
    # governor change) over their healthy mean
    return _node_timeline(rng, scenario, job, sk, _NUMA_PLAN, NU_REWORK_LEVEL, rework)


def _capped_lognormal(median: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """The first two moments of ``min(L, 1)``, ``L`` log-normal of ``median`` and log-space
    ``sigma`` (the lengths of responses capped at the maximum length)."""
    a = -np.log(median) / sigma  # where L reaches the cap, in standard units
    above = 1.0 - ndtr(a)
    return (median * math.exp(0.5 * sigma * sigma) * ndtr(a - sigma) + above,
            median ** 2 * math.exp(2.0 * sigma * sigma) * ndtr(a - 2.0 * sigma) + above)


@dataclass
class _Rollout:
    """The draws of a :func:`_rollout` series (arrays ``(ranks, n)`` or ``(workers, n)`` or
    ``(n,)``): each rank's generation worker, its compute at the device's rate and its host
    work; each worker's longest response per step (its decode iterations, over the maximum
    length) and its cache demand per response (the prompt and the resident generated tokens,
    same unit), its cache's capacity; the KV read at a full cache over the weights' read, the
    recompute cost of preemption (unit: the longest response), the scale from that unit to
    the busy time; the training's busy time per step, each worker's weight sync, the reward
    server's episodes (each step's key and the decode's slowdown in an episode, per worker),
    the level, the restarts' warm-ups and the extra work (checkpoints, validation)."""

    node: np.ndarray
    dev: np.ndarray
    host: np.ndarray
    longest: np.ndarray
    demand: np.ndarray
    cache: np.ndarray
    kv: float
    preempt: float
    scale: float
    train: np.ndarray
    sync: np.ndarray
    key: np.ndarray
    burst: np.ndarray
    level: np.ndarray
    warm: np.ndarray
    rest: np.ndarray

    def generation(self, cache: np.ndarray) -> np.ndarray:
        """Each worker's decode time per step (unit: a decode iteration's weight read) with
        the capacities ``cache``: the longest response's iterations, each reading the weights
        and the KV cache (``kv`` of it at a full cache), plus the recompute of the sequences
        preempted where the demand exceeds the cache, ``preempt x (1 + x)`` with ``x`` the
        demand over the capacity, minus 1 (convex)."""
        occ = self.demand / cache
        x = np.maximum(occ - 1.0, 0.0)
        return np.asarray(self.longest * (1.0 + self.kv * np.minimum(occ, 1.0))
                          + self.preempt * x * (1.0 + x))

    def busy(self, slow: tuple[_NodeSlow, ...] = (), warm: np.ndarray | None = None
             ) -> np.ndarray:
        """Each rank's busy time per step under the slowdowns ``slow`` (``warm``: the warm-ups,
        else the series' own): its worker's generation and its training share at the
        device's rate, plus its host work, under the warm-up and the level; plus its worker's
        weight sync and the extra work.  On the slowdown's worker, with ``w`` climbing
        linearly from 0 at ``a`` to 1 over ``ramp`` steps: ``cache`` (the capacity ``1 / (1 +
        g w)``: preemptions begin earlier), ``degraded`` (the decode ``1 + g w`` times
        slower), ``reward`` (a step whose key is below ``g w`` is in an episode of the
        reward server: the decode ``1 + burst`` times slower) and ``sync`` (the weight loads
        ``1 + g w`` times longer)."""
        workers, n = self.longest.shape
        cache = np.repeat(self.cache[:, None], n, axis=1)
        rate, sx = np.ones((workers, n)), np.ones((workers, n))
        for sl in slow:
            rows, span, w = sl.rows(), slice(sl.a, sl.b), sl.weight()
            if sl.kind == "cache":
                cache[rows, span] /= 1.0 + sl.g * w
            elif sl.kind == "reward":
                rate[rows, span] *= 1.0 + self.burst[rows, span] * (self.key[rows, span]
                                                                   < sl.g * w)
            elif sl.kind == "degraded":
                rate[rows, span] *= 1.0 + sl.g * w
            else:
                sx[rows, span] *= 1.0 + sl.g * w
        gen = (self.scale * self.generation(cache) * rate)[self.node]
        wu = (self.warm if warm is None else warm) * self.level
        return np.asarray(((gen + self.train) * self.dev + self.host) * wu
                          + (self.sync * sx)[self.node] + self.rest)


_ROLLOUT_PLAN = _NodePlan(
    kinds=RO_KINDS, top=(("cache", RO_CACHE_MAX), ("reward", 1.0), ("degraded", RO_RATE_MAX),
                         ("sync", RO_SYNC_MAX)),
    restarts=(("cache", "ab"),), every=(), climbing=("reward",), last="degraded",
    climb=RO_CLIMB)


def _moving_mean(x: np.ndarray, k: int) -> np.ndarray:
    """The means of ``x``'s windows of ``k`` along its last axis (at least that long)."""
    c = np.concatenate([np.zeros((*x.shape[:-1], 1)), np.cumsum(x, axis=-1)], axis=-1)
    return np.asarray((c[..., k:] - c[..., :-k]) / k)


def _halved(size: float, series: Callable[[float], np.ndarray], flat: np.ndarray, k: int,
            halvings: int, rise: float) -> float | None:
    """The first of ``size``, ``size / 2``, ... (``halvings`` tries) at which the healthy
    drift or wave of that size, ``series(size)`` (after the lead, moving means over ``k``
    steps), moves by less than ``rise`` over the series without it, ``flat``; None where
    none does.  ``series`` and ``flat`` are one series ``(n,)`` or one per rank ``(ranks,
    n)`` (then every rank's must hold).  ``series`` may set its caller's state (the drift or
    wave it draws): the last call is at the size returned, so that state is the one kept
    (the caller resets it where None).  A rollout's length drift (:func:`_rollout`), the
    WAN's wave (:func:`_wan`), the PCIe switch's contention and a hidden downtraining
    (:func:`_pcie`) and a VM host's co-tenants' variation (:func:`_steal`)."""
    ref = _moving_mean(flat[..., LEAD_ITERS:], k)
    for _ in range(halvings):
        moved = _moving_mean(series(size)[..., LEAD_ITERS:], k) / ref
        if float((moved.max(axis=-1) / moved.min(axis=-1)).max()) < 1.0 + rise:
            return size
        size *= 0.5
    return None


def _rollout(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Reinforcement-learning steps bound by generation (module docstring): each rank's busy
    time, the ranks of a generation worker slowed together; the corpus' noise is turned off
    (``noise_scale`` ~ 0)."""
    job = _ranked_job(rng, NODE_RANKS, RO_TP, NODE_COMPUTE, NODE_RANK_JITTER, RO_HOST,
                      RO_HOST_JITTER)
    n, t, nodes = job.n, job.t, job.nodes
    rest = _node_ckpt_eval(rng, t, job.rate)
    # the responses: each worker's longest of `seqs` log-normal lengths (an order statistic)
    # and their mean (a sum of `seqs`: normal about the capped log-normal's mean)
    seqs = int(rng.choice(RO_SEQS))
    median = _loguniform(rng, *RO_MEDIAN)
    sigma = float(rng.uniform(*RO_SIGMA))
    top_z = ndtri(np.exp(np.log(rng.random((nodes, n))) / seqs))
    mean_z = rng.standard_normal((nodes, n))
    prompt = float(rng.uniform(*RO_PROMPT))
    resident = float(rng.uniform(*RO_RESIDENT))
    kv = float(rng.uniform(*RO_KV))
    gshare = float(rng.uniform(*RO_GEN))
    preempt = float(rng.uniform(*RO_PREEMPT))
    occupancy = float(rng.uniform(*RO_OCCUPANCY))
    spread = np.exp(RO_CACHE_NODE * rng.standard_normal(nodes))
    drift = float(rng.uniform(*RO_DRIFT))
    climb = 1.0 - np.exp(-t / (float(rng.uniform(*RO_DRIFT_TAU)) * n))

    def responses(d: float) -> tuple[np.ndarray, np.ndarray]:
        """The longest response and the mean one per worker and step, the median drifted by
        ``exp(d x climb)``."""
        m = median * np.exp(d * climb)
        e1, e2 = _capped_lognormal(m, sigma)
        mean = e1 + np.sqrt(np.maximum(e2 - e1 * e1, 0.0) / seqs) * mean_z
        return np.minimum(1.0, m * np.exp(sigma * top_z)), np.maximum(0.1 * e1, mean)

    longest0, mean0 = responses(0.0)
    demand0 = prompt + resident * mean0
    cache = float(np.median(demand0[:, LEAD_ITERS:])) / occupancy * spread
    ro = _Rollout(node=job.node, dev=job.dev, host=job.host, longest=longest0, demand=demand0,
                  cache=cache, kv=kv, preempt=preempt * float(longest0.mean()), scale=1.0,
                  train=np.zeros(n), sync=np.zeros((nodes, n)), key=np.ones((nodes, n)),
                  burst=np.zeros((nodes, n)), level=np.ones(n), warm=np.ones(n), rest=rest)
    gen0, tok0 = ro.generation(ro.cache[:, None]), mean0.mean(axis=0)
    g_unit, t_unit = float(gen0[:, LEAD_ITERS:].mean()), float(tok0[LEAD_ITERS:].mean())

    def work(gen: np.ndarray, tok: np.ndarray) -> np.ndarray:
        return np.asarray(gshare * gen.mean(axis=0) / g_unit + (1.0 - gshare) * tok / t_unit)

    # the policy's length drift, halved until it moves the mean busy time by less than
    # RO_DRIFT_RISE over the series (over any labelled span too)
    means = [mean0]

    def drifted(d: float) -> np.ndarray:
        ro.longest, means[0] = responses(d)
        ro.demand = prompt + resident * means[0]
        return work(ro.generation(ro.cache[:, None]), means[0].mean(axis=0))

    if _halved(drift, drifted, work(gen0, tok0), 200, RO_DRIFT_HALVINGS, RO_DRIFT_RISE) is None:
        ro.longest, ro.demand, means[0] = longest0, demand0, mean0
    mean = means[0]
    ro.scale = gshare / g_unit
    ro.train = (1.0 - gshare) * mean.mean(axis=0) / t_unit
    # the weight sync into each worker's engine every few steps; the reward server's episodes
    every = int(rng.choice(RO_SYNC_EVERY))
    sj = float(rng.uniform(*RO_SYNC_JITTER))
    at = t % every == every - 1
    ro.sync[:, at] = float(rng.uniform(*RO_SYNC)) * np.exp(
        sj * rng.standard_normal((nodes, int(at.sum()))) - 0.5 * sj * sj)
    ro.key, ro.burst = _keyed_runs(rng, nodes, n, RO_EPISODE, RO_EPISODE_X)
    # planned restarts between parts (another batch: a level); each rank's busy time,
    # labelled by the span's mean rise of its worker's ranks over their healthy mean
    return _node_timeline(rng, scenario, job, ro, _ROLLOUT_PLAN, RO_RESHAPE_LEVEL)


def _overlapped(work: np.ndarray, tail: float, room: np.ndarray) -> np.ndarray:
    """The exposed part of ``work`` pipelined with other work ``room``: what ``room`` leaves of
    it, but at least its last share ``tail`` (issued after ``room`` is done).  The ring
    all-reduce behind the backward (:func:`_fabric`, :func:`_wan`), the drive I/O behind the
    optimizer's CPU update (:func:`_nvme`), the outer sync over the next inner steps
    (:func:`_wan`), a GPU's PCIe transfers behind its compute (:func:`_pcie`) and a launch
    thread's CPU time behind the launch queue's lead (:func:`_steal`)."""
    return np.asarray(np.maximum(tail * work, work - room))


def _ecmp(rng: np.random.Generator, leaves: int, uplinks: int, flows: int) -> np.ndarray:
    """ECMP hashing when a communicator is created: each leaf's ``flows`` flows (its ring
    edge to the next leaf) hashed uniformly onto its ``uplinks`` uplinks; the flows on each,
    ``(leaves, uplinks)`` (balls into bins)."""
    h = rng.integers(0, uplinks, (leaves, flows))
    return np.asarray((h[:, :, None] == np.arange(uplinks)).sum(axis=1), dtype=float)


def _uplinks(flows: np.ndarray, other: np.ndarray, cap: float | np.ndarray) -> np.ndarray:
    """Each uplink's factor on the job's flows over it: ``max(1, flows / (cap x (1 -
    other)))`` where it carries one (``other``: the other jobs' share of its capacity), else
    0 (arrays broadcast)."""
    x = np.maximum(1.0, flows / (cap * (1.0 - other)))
    return np.asarray(np.where(flows > 0, x, 0.0))


@dataclass
class _Spines:
    """The draws of a :func:`_fabric` series (arrays ``(ranks, n)``, ``(leaves, uplinks, n)``,
    ``(leaves, n)`` or ``(n,)``): each rank's node, its compute at the device's rate and its
    host time, the device's rate (the backward that hides the collective); the job's flows
    on each leaf's uplinks in each hash epoch (from the start or a restart to the next) and
    each step's epoch; the leaves' factors under the hashes a labelled restart drew instead
    (``alt``); the other jobs' traffic on each uplink (its share of the capacity), an
    uplink's capacity (flows at the NIC-bound rate), each flow's hash over the uplinks left
    when one is down (``spill``), a neighbour's episodes (each step's key and its traffic,
    per leaf, and the share of the runs that are episodes), a degraded uplink's errors (each
    step's chance draw and its cost); the collective's NIC-bound time, the share of the
    compute that hides it, its last bucket's share, its jitter (with the micro-bursts), the
    level, the restarts' warm-ups and the extra work (checkpoints, evaluations)."""

    node: np.ndarray
    dev: np.ndarray
    host: np.ndarray
    rate: np.ndarray
    loads: np.ndarray
    epoch: np.ndarray
    alt: np.ndarray
    bg: np.ndarray
    cap: float
    spill: np.ndarray
    key: np.ndarray
    burst: np.ndarray
    duty: float
    err_u: np.ndarray
    err_x: np.ndarray
    comm: float
    hide: float
    tail: float
    jit: np.ndarray
    level: np.ndarray
    warm: np.ndarray
    rest: np.ndarray
    lf: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.refresh()

    def refresh(self) -> None:
        """The leaves' factors (:meth:`leaves`) under each epoch's hashes, ``(leaves, n)``."""
        self.lf = np.ones(self.alt.shape)
        for e in range(self.loads.shape[0]):
            at = np.flatnonzero(self.epoch == e)
            if at.size:
                self.lf[:, at[0]:at[-1] + 1] = self.leaves(self.loads[e], at[0], at[-1] + 1)

    def leaves(self, loads: np.ndarray, a: int, b: int) -> np.ndarray:
        """Each leaf's factor over steps ``[a, b)`` with the flows ``loads`` (leaves,
        uplinks): its most loaded uplink that carries a flow of the job, ``max(1, flows /
        (capacity x (1 - other jobs' share)))`` (the job's flows share what the other jobs
        leave, each at most at its NIC-bound rate)."""
        return _uplinks(loads[:, :, None], self.bg[:, :, a:b], self.cap).max(axis=1)

    def target(self, sl: _NodeSlow) -> tuple[int, int]:
        """The leaf and uplink a slowdown hits: one of those carrying the job's flows in its
        epoch, by its aim."""
        used = np.argwhere(self.loads[self.epoch[sl.a]] > 0)
        lk = used[min(int(sl.aim * len(used)), len(used) - 1)]
        return int(lk[0]), int(lk[1])

    def leaf(self, sl: _NodeSlow) -> np.ndarray:
        """The factor of the leaf ``sl`` hits over its span (``w`` climbing linearly from 0 at
        ``a`` to 1 over ``ramp`` steps): ``neighbour`` (a heavy job's flows on the uplink,
        ``g`` times its episode's factor, sharing it fairly with the job's, in the steps whose
        key is below the duty), ``down`` (the uplink down until it is repaired: the ECMP group
        shrinks and the leaf re-hashes every flow of the job over the uplinks left, by
        ``spill``; the other jobs' traffic on it, their light share and ``g`` more, spread
        evenly over them) and ``degraded``
        (its rate ``1 / (1 + g w)``, and errors: a step retransmits, its cost added, with
        chance ``FB_ERR g w``)."""
        lo, k = self.target(sl)
        span, w = slice(sl.a, sl.b), sl.weight()
        load = np.repeat(self.loads[self.epoch[sl.a], lo][:, None], w.size, axis=1)
        bg, cap = self.bg[lo, :, span].copy(), np.full(load.shape, self.cap)
        extra = np.zeros(w.size)
        if sl.kind == "neighbour":
            load[k] += sl.g * self.burst[lo, span] * (self.key[lo, span] < self.duty)
        elif sl.kind == "down":
            others = np.delete(np.arange(load.shape[0]), k)
            flows = int(load[:, 0].sum())
            load = np.zeros(load.shape)
            np.add.at(load, others[(self.spill[lo, :flows] * others.size).astype(np.int64)],
                      1.0)
            bg[others] += (bg[k] + sl.g) / others.size
        else:
            cap[k] /= 1.0 + sl.g * w
            extra = self.err_x[span] * (self.err_u[span] < np.minimum(FB_ERR_MAX,
                                                                      FB_ERR * sl.g * w))
        return np.asarray(_uplinks(load, bg, cap).max(axis=0) + extra)

    def busy(self, slow: tuple[_NodeSlow, ...] = (), warm: np.ndarray | None = None
             ) -> np.ndarray:
        """Each rank's busy time per step under the slowdowns ``slow`` (``warm``: the warm-ups,
        else the series' own): its compute and host time under the warm-up and the level,
        plus the ring all-reduce's exposed part, the same on every rank (the ring moves at
        its slowest flow: the collective's NIC-bound time times the largest leaf factor, its
        jitter), ``max(tail x collective, collective - hide x compute)``, plus the extra
        work; ``rehash`` puts a labelled restart's hashes (``alt``) over its span."""
        lf = self.lf.copy()
        for sl in slow:
            if sl.kind == "rehash":
                lf[:, sl.a:sl.b] = self.alt[:, sl.a:sl.b]
            else:
                lf[self.target(sl)[0], sl.a:sl.b] = self.leaf(sl)
        comm = self.comm * lf.max(axis=0) * self.jit
        wu = (self.warm if warm is None else warm) * self.level
        exposed = _overlapped(comm, self.tail, self.hide * self.rate * wu)
        return np.asarray((self.dev + self.host) * wu + exposed + self.rest)


_FABRIC_PLAN = _NodePlan(
    kinds=FB_KINDS, top=(("neighbour", FB_NEIGHBOUR_MAX), ("down", FB_DOWN_MAX),
                         ("degraded", FB_RATE_MAX)),
    restarts=(), every=("neighbour", "down", "degraded"), climbing=("degraded",),
    last="degraded", climb=FB_CLIMB, aimed=True)


def _fb_rehash(rng: np.random.Generator, scenario: str, job: _RankedJob, sp: _Spines,
               restarted: np.ndarray) -> _Resumed:
    """Each planned restart re-creates the communicator: new hashes (:func:`_ecmp`) from it to
    the next restart.  Against the old hashes kept over the same steps (the same warm-up), a
    new level whose mean busy time rises by less than :data:`FB_MOVE_HEALTHY` is healthy
    (kept: the next restart's level before); in a ``slow`` series, one that rises from
    ``NODE_SLOWDOWN[0]`` to :data:`FB_REHASH_MAX`, decidably and visibly
    (:func:`_visible_rise`; never right after another), is a labelled slowdown (``rehash``,
    every rank) and takes its parts; any other is drawn again (at most ``SPAN_TRIES`` times,
    then the old hashes are kept)."""
    out = _Resumed(taken=np.zeros(job.k, dtype=bool))
    at = [int(job.starts[j]) for j in range(job.k) if restarted[j]]
    flows = int(sp.loads[0, 0].sum())
    labelled = False
    for a, b in zip(at, [*at[1:], job.n][:len(at)], strict=True):
        e = int(sp.epoch[a])
        sp.loads[e] = sp.loads[e - 1]
        sp.refresh()
        base = sp.busy().mean(axis=0)
        allow, labelled = scenario == "slow" and not labelled, False
        sl = _NodeSlow(a, b, "rehash", 0.0)
        for _ in range(SPAN_TRIES):
            new = _ecmp(rng, sp.loads.shape[1], sp.loads.shape[2], flows)
            sp.alt[:, a:b] = sp.leaves(new, a, b)
            y = sp.busy((sl,)).mean(axis=0)
            if float(y[a:b].mean()) < (1.0 + FB_MOVE_HEALTHY) * float(base[a:b].mean()):
                sp.loads[e] = new
                sp.refresh()
                break
            got = (_visible_rise((*_changed_span(y, base, a, b), 0.0), base, NODE_SLOWDOWN[0],
                                 FB_REHASH_MAX, NODE_SLOW_ITERS[0], SPAN_DECIDABLE, after=False)
                   if allow else None)
            if got is not None:
                out.slow += (sl,)
                out.events.append((got[0], got[1], got[3], "rehash"))
                out.who.append(tuple(range(job.ranks)))
                out.taken |= (job.starts >= a) & (job.starts < b)
                labelled = True
                break
    return out


def _fabric(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Inter-node collectives over a leaf / spine fabric with ECMP hashing (module docstring):
    each rank's busy time, the ring's exposed time on every rank; the corpus' noise is turned
    off (``noise_scale`` ~ 0)."""
    job = _ranked_job(rng, FB_RANKS, FB_NODE, NODE_COMPUTE, NODE_RANK_JITTER, FB_HOST,
                      FB_HOST_JITTER, min_nodes=2)
    n, t = job.n, job.t
    rest = _node_ckpt_eval(rng, t, job.rate)
    per = min(int(rng.choice(FB_LEAF)), job.nodes // 2)
    leaves = -(-job.nodes // per)
    uplinks = int(rng.integers(FB_UPLINKS[0], FB_UPLINKS[1] + 1))
    flows = int(rng.choice(FB_CHANNELS))
    loads = _ecmp(rng, leaves, uplinks, flows)[None]
    # the other jobs' traffic on each uplink: light, each wandering on its own
    sd, phi = float(rng.uniform(*FB_BG_SD)), float(rng.uniform(*FB_BG_PHI))
    z = lfilter([sd * math.sqrt(1.0 - phi * phi)], [1.0, -phi],
                rng.standard_normal((leaves, uplinks, n)), axis=-1)
    bg = np.minimum(FB_BG_MAX, _loguniform(rng, *FB_BG) * np.exp(z - 0.5 * sd * sd))
    key, burst = _keyed_runs(rng, leaves, n, FB_EPISODE, FB_EPISODE_X)
    jj = float(rng.uniform(*FB_JITTER))
    jit = (np.exp(jj * rng.standard_normal(n) - 0.5 * jj * jj)
           * (1.0 + _stalls(rng, (n,), FB_SPIKE_P, FB_SPIKE_X)))
    sp = _Spines(node=job.node, dev=job.dev, host=job.host, rate=job.rate, loads=loads,
                 epoch=np.zeros(n, dtype=np.int64), alt=np.ones((leaves, n)), bg=bg,
                 cap=max(1.0, flows / uplinks) * _loguniform(rng, *FB_HEADROOM),
                 spill=rng.random((leaves, flows)), key=key,
                 burst=burst, duty=float(rng.uniform(*FB_DUTY)), err_u=rng.random(n),
                 err_x=_loguniforms(rng, *FB_RETX, n),
                 comm=float(rng.uniform(*FB_COMM)), hide=float(rng.uniform(*FB_HIDE)),
                 tail=float(rng.uniform(*FB_TAIL)), jit=jit, level=np.ones(n),
                 warm=np.ones(n), rest=rest)

    def restart(s0: int) -> None:  # a new epoch (its hashes drawn by _fb_rehash)
        sp.loads = np.concatenate([sp.loads, sp.loads[-1:]])
        sp.epoch[s0:] += 1

    # planned restarts between parts, each with new hashes (a resume that is slower by the
    # rule is labelled); each rank's busy time, labelled by the span's mean rise of every
    # rank (the ring is the whole job's) over their healthy mean
    return _node_timeline(rng, scenario, job, sp, _FABRIC_PLAN, FB_RESTART_LEVEL, restart,
                          lambda restarted: _fb_rehash(rng, scenario, job, sp, restarted))


def _restart_steps(warm: np.ndarray) -> np.ndarray:
    """The steps where a restart begins in the warm-ups ``warm``: its first step is 2-10 times
    the step before it (:data:`NODE_FIRST`), a hump's step at most 1.4 times
    (:data:`NODE_WARM_AMPLITUDE`)."""
    return np.flatnonzero(warm[1:] > 1.5 * warm[:-1]) + 1


@dataclass
class _Drives:
    """The draws of a :func:`_nvme` series (arrays ``(ranks, n)``, ``(nodes, n)`` or
    ``(n,)``): each rank's node, its compute at the device's rate and its host time, the
    optimizer's CPU update per step (the I/O pipelined with it); each node's optimizer I/O
    per step at the fast rates (with its jitter), the write's share of it, a native write's
    time over an SLC one; each node's SLC cache (unit: a step's write), the cache folded back
    in an ordinary step's idle time, the drive's extra idle time per step (checkpoints,
    evaluations; mean steps); each node's garbage-collection draws (each step's chance draw,
    its pause in native writes of the step's volume) and the chance per step; the drive's
    thermal decay per step and its throttle threshold (over the healthy steady temperature);
    another tenant's episodes (each step's key and its I/O, per node, and the share of the
    runs that are episodes); the last sub-group's share of the I/O, the level, the restarts'
    warm-ups and the extra work (checkpoints, evaluations)."""

    node: np.ndarray
    dev: np.ndarray
    host: np.ndarray
    opt: float
    io: np.ndarray
    write: float
    native: float
    cache: np.ndarray
    fold: float
    idle: np.ndarray
    gc_u: np.ndarray
    gc_x: np.ndarray
    gc_p: np.ndarray
    alpha: float
    threshold: float
    key: np.ndarray
    burst: np.ndarray
    duty: float
    tail: float
    level: np.ndarray
    warm: np.ndarray
    rest: np.ndarray
    memo: dict[bytes, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def state(self, warm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The drives' state per step with the restarts of ``warm`` (each restart's downtime
        folds the whole cache and cools the drive): the share of each node's write past its
        SLC cache (at the native rate), ``(nodes, n)``, and the drive's open-loop temperature
        rise, ``(n,)`` (1 at a steady write).  Each step writes one unit while the cache
        folds ``fold x (1 + idle)`` back, the fill clipped to ``[0, cache]`` (a scan); the
        temperature follows the write power (its volume over the step's length, ``1 / (1 +
        idle)``) with the decay ``alpha`` per step."""
        resets = _restart_steps(warm)
        key = resets.tobytes()
        if key not in self.memo:
            n = self.idle.size
            net = 1.0 - self.fold * (1.0 + self.idle)
            first = np.concatenate([[0], resets])  # an empty cache: the start, each restart
            cap = self.cache[:, None]
            lo, hi = np.zeros((cap.size, n)), np.repeat(cap, n, axis=1)
            lo[:, first] = hi[:, first] = np.clip(net[first][None, :], 0.0, cap)
            fill = _clip_scan(np.repeat(net[None, :], cap.size, axis=0), lo, hi, 0.0)
            before = np.concatenate([np.zeros((cap.size, 1)), fill[:, :-1]], axis=1)
            before[:, first] = 0.0
            past = np.clip(before + net[None, :] - cap, 0.0, 1.0)
            power = 1.0 / (1.0 + self.idle)
            temp = np.concatenate([lfilter([1.0 - self.alpha], [1.0, -self.alpha], power[a:b])
                                   for a, b in zip(first, [*first[1:], n], strict=True)])
            self.memo[key] = (past, temp)
        return self.memo[key]

    def busy(self, slow: tuple[_NodeSlow, ...] = (), warm: np.ndarray | None = None
             ) -> np.ndarray:
        """Each rank's busy time per step under the slowdowns ``slow`` (``warm``: the warm-ups,
        else the series' own): its compute and host time under the warm-up and the level,
        plus the optimizer's CPU update and its node's optimizer I/O past it (pipelined with
        it, :func:`_overlapped`): the read, the write into the SLC cache and past it at the
        native rate, the GC pauses (native writes), plus the extra work.  On the slowdown's
        node over its span: ``worn`` (the native rate ``1 / (1 + g)``, GC ``1 + g`` times as
        often), ``tenant`` (in the steps of its episodes, whose key is below the duty, the
        drive shared with ``g`` times the episode's I/O: the job's I/O ``1 + g x`` times
        longer) and ``fan`` (the drive's thermal resistance and time constant ``1 + g``
        times: its temperature climbs from the step before the span towards ``1 + g`` times
        the healthy one, and where it passes the threshold the drive throttles its I/O by the
        ratio, which holds it there)."""
        wu = self.warm if warm is None else warm
        past, temp = self.state(wu)
        nodes, n = self.io.shape
        native = np.full((nodes, n), self.native)
        chance = np.repeat(self.gc_p[None, :], nodes, axis=0)
        slower = np.ones((nodes, n))
        for sl in slow:
            rows, span = sl.rows(), slice(sl.a, sl.b)
            if sl.kind == "worn":
                native[rows, span] *= 1.0 + sl.g
                chance[rows, span] *= 1.0 + sl.g
            elif sl.kind == "tenant":
                slower[rows, span] *= 1.0 + sl.g * self.burst[rows, span] * (
                    self.key[rows, span] < self.duty)
            else:
                alpha = self.alpha ** (1.0 / (1.0 + sl.g))
                hot, _ = lfilter([(1.0 - alpha) * (1.0 + sl.g)], [1.0, -alpha],
                                 1.0 / (1.0 + self.idle[span]), zi=[alpha * temp[sl.a - 1]])
                slower[rows, span] *= np.maximum(1.0, hot / self.threshold)
        gc = self.gc_x * (self.gc_u < chance)
        io = self.io * (1.0 - self.write * past + self.write * native * (past + gc)) * slower
        wl = wu * self.level
        exposed = _overlapped(io[self.node], self.tail, np.asarray(self.opt))
        return np.asarray((self.dev + self.host) * wl + self.opt + exposed + self.rest)


_NVME_PLAN = _NodePlan(
    kinds=NV_KINDS, top=(("worn", NV_WORN_MAX), ("tenant", NV_TENANT_MAX), ("fan", NV_FAN_MAX)),
    restarts=(("worn", "ab"),), every=(), climbing=(), last="tenant", climb=(1.0, 1.0))


def _nvme(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Optimizer states offloaded to local NVMe drives (module docstring): each rank's busy
    time, the ranks of a node waiting on its drive; the corpus' noise is turned off
    (``noise_scale`` ~ 0)."""
    job = _ranked_job(rng, NODE_RANKS, NV_NODE, NODE_COMPUTE, NODE_RANK_JITTER, NV_HOST,
                      NV_HOST_JITTER)
    n, t, nodes = job.n, job.t, job.nodes
    rest = _node_ckpt_eval(rng, t, job.rate)
    io0 = float(rng.uniform(*NV_IO))
    ij = float(rng.uniform(*NV_IO_JITTER))
    io = io0 * np.exp(ij * rng.standard_normal((nodes, n)) - 0.5 * ij * ij)
    fold = float(rng.uniform(*NV_FOLD))
    cache = (_loguniform(rng, *NV_FILL) * max(1.0 - fold, NV_FILL_NET)
             * np.exp(NV_CACHE_NODE * rng.standard_normal(nodes)))
    gc_p = _loguniform(rng, *NV_GC_P) * (1.0 + float(rng.uniform(*NV_GC_GROW)) * t / n)
    tau = min(max(_loguniform(rng, *NV_TAU_S) / job.base_s, NV_TAU_STEPS[0]), NV_TAU_STEPS[1])
    key, burst = _keyed_runs(rng, nodes, n, NV_EPISODE, NV_EPISODE_X)
    dr = _Drives(node=job.node, dev=job.dev, host=job.host,
                 opt=float(rng.uniform(*NV_OPT)) * io0, io=io,
                 write=float(rng.uniform(*NV_WRITE)), native=float(rng.uniform(*NV_NATIVE)),
                 cache=cache, fold=fold, idle=rest / float(job.rate[LEAD_ITERS:].mean()),
                 gc_u=rng.random((nodes, n)),
                 gc_x=_loguniforms(rng, *NV_GC_X, (nodes, n)),
                 gc_p=gc_p, alpha=math.exp(-1.0 / tau),
                 threshold=float(rng.uniform(*NV_THRESHOLD)), key=key, burst=burst,
                 duty=float(rng.uniform(*NV_DUTY)),
                 tail=float(rng.uniform(*NV_TAIL)), level=np.ones(n), warm=np.ones(n),
                 rest=rest)
    # planned restarts between parts (another batch: a level; the downtime folds the cache
    # and cools the drive); each rank's busy time, labelled by the span's mean rise of its
    # node's ranks over their healthy mean
    return _node_timeline(rng, scenario, job, dr, _NVME_PLAN, NV_RESHAPE_LEVEL)


def _cycles(resets: np.ndarray, n: int, every: int) -> np.ndarray:
    """Each of ``n`` steps' place in a cycle of ``every`` steps that starts at step 0 and again
    at each restart ``resets`` (a schedule kept by the process: a restart begins it anew: the
    profiler's, :func:`_observe`; the outer syncs', :func:`_wan`)."""
    t = np.arange(n)
    start = np.zeros(n, dtype=bool)
    start[0] = True
    start[resets] = True
    return np.asarray((t - np.maximum.accumulate(np.where(start, t, 0))) % every)


@dataclass
class _Observers:
    """The draws of an :func:`_observe` series (arrays ``(ranks, n)`` or ``(n,)``): each rank's
    compute at the device's rate and its host time, the ranks that observe (their profiler,
    logs and metrics); the profiler's schedule (its cycle, 0 where no profiler runs, its
    warmup and active steps, an active step's overhead on the compute and host, a warmup
    step's share of it, the trace export in mean steps); each observer's log lines per step
    and the metric exports / log flushes (mean steps), rank 0's progress bar, each step's
    collectives over their mean, the shared filesystem's slow episodes (each step's key and
    the write latency's factor in an episode, and the share of the runs that are episodes),
    the level, the restarts' warm-ups and the extra work (checkpoints, evaluations)."""

    dev: np.ndarray
    host: np.ndarray
    observers: np.ndarray
    every: int
    warmup: int
    active: int
    prof_x: float
    prof_warm: float
    export: float
    log: np.ndarray
    flush: np.ndarray
    bar: np.ndarray
    calls: np.ndarray
    key: np.ndarray
    burst: np.ndarray
    duty: float
    level: np.ndarray
    warm: np.ndarray
    rest: np.ndarray
    memo: dict[bytes, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    def schedule(self, warm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The profiler's overhead on the observers per step with the restarts of ``warm`` (its
        schedule begins anew at each, :func:`_cycles`): the compute and host's factor less 1
        (``prof_x`` in an active step, ``prof_warm`` of it in a warmup step) and the trace
        export (mean steps, on the step after the active ones), both ``(n,)``; zero where no
        profiler runs."""
        resets = _restart_steps(warm)
        key = resets.tobytes()
        if key not in self.memo:
            n = self.rest.size
            x, out = np.zeros(n), np.zeros(n)
            if self.every:
                c = _cycles(resets, n, self.every)
                on = self.every - self.active  # a cycle's first active step
                x[(c >= on - self.warmup) & (c < on)] = self.prof_warm * self.prof_x
                x[c >= on] = self.prof_x
                done = np.flatnonzero(c == self.every - 1) + 1
                out[done[done < n]] = self.export
            self.memo[key] = (x, out)
        return self.memo[key]

    def busy(self, slow: tuple[_NodeSlow, ...] = (), warm: np.ndarray | None = None
             ) -> np.ndarray:
        """Each rank's busy time per step under the slowdowns ``slow`` (``warm``: the warm-ups,
        else the series' own): its compute and host time under the warm-up and the level, an
        observer's times the profiler's factor; plus an observer's log lines, flushes and
        trace exports, rank 0's progress bar and the extra work.  On the observers (``node``
        0) or every rank (-1), with ``w`` climbing linearly from 0 at ``a`` to 1 over
        ``ramp`` steps: ``profiler`` (left active: the factor at least ``1 + g w`` on every
        step), ``anomaly`` (anomaly detection or synchronous launches: the compute and host
        ``1 + g w`` times), ``nccl_debug`` (a log line per collective: ``g w`` mean steps a
        step times the step's collectives over their mean), ``nfs_log`` (the log lines and
        flushes ``1 + g x`` times longer in the steps of the filesystem's slow episodes,
        whose key is below the duty) and ``log_growth`` (the log lines ``1 + g w`` times)."""
        wu = self.warm if warm is None else warm
        x, out = self.schedule(wu)
        ranks, n = self.dev.shape
        fx, lines, io = np.ones((ranks, n)), np.ones((ranks, n)), np.ones((ranks, n))
        extra = np.zeros((ranks, n))
        fx[self.observers] += x
        for sl in slow:
            rows = self.observers if sl.node >= 0 else slice(None)
            span, w = slice(sl.a, sl.b), sl.weight()
            if sl.kind == "profiler":
                fx[rows, span] = np.maximum(fx[rows, span], 1.0 + sl.g * w)
            elif sl.kind == "anomaly":
                fx[rows, span] *= 1.0 + sl.g * w
            elif sl.kind == "nccl_debug":
                extra[rows, span] += sl.g * w * self.calls[span]
            elif sl.kind == "nfs_log":
                io[rows, span] *= 1.0 + sl.g * self.burst[span] * (self.key[span] < self.duty)
            else:
                lines[rows, span] *= 1.0 + sl.g * w
        obs = np.zeros((ranks, 1))
        obs[self.observers] = 1.0
        extra += obs * ((self.log * lines + self.flush) * io + out)
        extra[0] += self.bar
        return np.asarray((self.dev + self.host) * fx * (wu * self.level) + extra + self.rest)


_OBSERVE_PLAN = _NodePlan(
    kinds=OB_KINDS, top=(("profiler", OB_ACTIVE_MAX), ("anomaly", OB_ANOMALY_MAX),
                         ("nccl_debug", OB_NCCL_MAX), ("nfs_log", OB_NFS_MAX),
                         ("log_growth", OB_GROW_MAX)),
    restarts=(("profiler", "b"), ("anomaly", "ab"), ("nccl_debug", "ab"), ("log_growth", "b")),
    every=("anomaly", "nccl_debug"), climbing=("log_growth",), last="profiler",
    climb=(1.0, 1.0))


def _observe(rng: np.random.Generator, scenario: str) -> _Timeline:
    """The job's own observability overhead (module docstring): each rank's busy time, the
    observers (rank 0, or each node's first rank) slowed by their profiler and logs, every
    rank by a debug mode; the corpus' noise is turned off (``noise_scale`` ~ 0)."""
    job = _ranked_job(rng, NODE_RANKS, OB_NODE, NODE_COMPUTE, NODE_RANK_JITTER, OB_HOST,
                      OB_HOST_JITTER)
    n, t, ranks = job.n, job.t, job.ranks
    rest, evals = _node_ckpt_eval_at(rng, t, job.rate)
    m = int(np.count_nonzero(job.node == 0))
    observers = np.arange(1) if rng.random() < OB_FIRST_P else np.arange(0, ranks, m)
    unit = float((job.dev + job.host)[:, LEAD_ITERS:].mean())  # the mean step's work
    # the profiler's schedule: its cycle made longer until its overhead is at most
    # OB_PROF_SHARE of it (a trace costs what it records, and its export)
    profiled = rng.random() < OB_PROF_P
    every = _logint(rng, *OB_PROF_EVERY)
    warmup = int(rng.integers(OB_PROF_WARMUP[0], OB_PROF_WARMUP[1] + 1))
    active = int(rng.integers(OB_PROF_ACTIVE[0], OB_PROF_ACTIVE[1] + 1))
    prof_x = _loguniform(rng, *OB_PROF_X)
    prof_warm = float(rng.uniform(*OB_PROF_WARM))
    export = active * _loguniform(rng, *OB_EXPORT) * unit
    cost = (active + warmup * prof_warm) * prof_x * unit + export
    every = max(every, warmup + active + 1, math.ceil(cost / (OB_PROF_SHARE * unit)))
    # the log lines (synchronous writes), the metric exports / flushes, the progress bar
    lj = float(rng.uniform(*OB_LOG_JITTER))
    log = _loguniform(rng, *OB_LOG) * unit * np.exp(lj * rng.standard_normal((ranks, n))
                                                    - 0.5 * lj * lj)
    fe = int(rng.choice(OB_FLUSH_EVERY))
    flush = np.zeros(n)
    at = t % fe == fe - 1
    flush[at] = unit * _loguniforms(rng, *OB_FLUSH, int(at.sum()))
    ticks = np.floor((t + 1) * job.base_s / OB_BAR_EVERY_S)
    refresh = ticks > np.concatenate([[0.0], ticks[:-1]])
    bar = refresh * _loguniform(rng, *OB_BAR_S) / job.base_s * unit
    # the collectives per step (an evaluation's more), over their mean
    calls = 1.0 + evals * float(rng.uniform(*OB_EVAL_CALLS))
    calls = calls / float(calls[LEAD_ITERS:].mean()) * unit
    runs = tuple(max(1 + j, round(x / job.base_s)) for j, x in enumerate(OB_EPISODE_S))
    key, burst = _keyed_runs(rng, 1, n, (runs[0], runs[1]), OB_EPISODE_X)
    ob = _Observers(dev=job.dev, host=job.host, observers=observers,
                    every=every if profiled else 0, warmup=warmup, active=active,
                    prof_x=prof_x, prof_warm=prof_warm, export=export, log=log, flush=flush,
                    bar=bar, calls=calls, key=key[0], burst=burst[0],
                    duty=float(rng.uniform(*OB_DUTY)), level=np.ones(n), warm=np.ones(n),
                    rest=rest)
    # planned restarts between parts (another batch: a level; the profiler's schedule begins
    # anew); each rank's busy time, labelled by the span's mean rise of the observers (every
    # rank's for a debug mode) over their healthy mean
    return _node_timeline(rng, scenario, job, ob, _OBSERVE_PLAN, OB_RESHAPE_LEVEL,
                          groups=(observers,))


@dataclass
class _Sites:
    """The draws of a :func:`_wan` series (arrays ``(ranks, n)``, ``(sites, n)`` or ``(n,)``):
    each rank's site, its compute at the device's rate and its host time; each site's
    all-reduce over its own fabric per step (with its jitter), the share of the compute that
    hides it and its last bucket's share; the outer sync across sites (every ``every`` steps,
    begun anew at each restart): its latency term and its bandwidth term at the full
    bandwidth (mean steps), the transfer's window over the bandwidth-delay product, the WAN's
    available bandwidth per step (its wave) and the sync's jitter; the overlap window
    (steps; 0: the sync blocks the step it follows), the share of the sync exposed at its
    end at least, the slowdown of a site's all-reduce while the sync uses its window; the
    level, the restarts' warm-ups and the extra work (checkpoints, evaluations)."""

    node: np.ndarray
    dev: np.ndarray
    host: np.ndarray
    inner: np.ndarray
    hide: float
    tail: float
    every: int
    lat: float
    vol: float
    bdp: float
    wave: np.ndarray
    jit: np.ndarray
    window: int
    behind: float
    wtail: float
    eta: float
    level: np.ndarray
    warm: np.ndarray
    rest: np.ndarray
    memo: dict[bytes, np.ndarray] = field(default_factory=dict, repr=False)

    def syncs(self, warm: np.ndarray) -> np.ndarray:
        """The steps after which an outer sync starts with the restarts of ``warm`` (the last
        inner step of each round of ``every``, :func:`_cycles`: a restart resumes from an
        outer step), those whose window ends inside the series."""
        resets = _restart_steps(warm)
        key = resets.tobytes()
        if key not in self.memo:
            n = self.rest.size
            at = np.flatnonzero(_cycles(resets, n, self.every) == self.every - 1)
            self.memo[key] = at[at + self.window < n]
        return self.memo[key]

    def busy(self, slow: tuple[_NodeSlow, ...] = (), warm: np.ndarray | None = None
             ) -> np.ndarray:
        """Each rank's busy time per step under the slowdowns ``slow`` (``warm``: the warm-ups,
        else the series' own): its compute and host time under the warm-up and the level, its
        site's all-reduce past the backward (:func:`_overlapped`), the extra work; and the
        outer sync, the same on every rank: ``lat x rtt + vol x max(1 / bandwidth, rtt /
        bdp)`` (a longer round trip makes a window-limited transfer slower) times its jitter,
        added to the step it follows (past ``behind`` of the compute, where it runs behind the
        backward), or, overlapped, run over the next ``window`` steps (the site's all-reduce
        ``1 + eta u`` slower meanwhile, ``u`` the share of the window's time it uses, at most
        1) and exposed at the window's last step past that time, at least its ``wtail`` share
        (the window's time taken at the site's healthy all-reduce: a site slowed on its own
        fabric is not credited with more room, so no step is faster than healthy).  With ``w``
        climbing linearly from 0 at ``a`` to 1 over ``ramp`` steps: ``fabric`` (the site's
        all-reduce ``1 + g w`` times), and, for the syncs whose window lies in the span (every
        rank waits at them), ``route`` (the round trip ``1 + g w`` times: a longer path),
        ``circuit`` (the bandwidth ``1 / (1 + g w)``: a degraded circuit) and ``peak`` (the
        bandwidth ``1 / (1 + g h)``, ``h`` a hump, a half sine over the span: a congested peak
        hour)."""
        wu = self.warm if warm is None else warm
        at = self.syncs(wu)
        sites, n = self.inner.shape
        fx, bw, rtt = np.ones((sites, n)), self.wave.copy(), np.ones(n)
        for sl in slow:
            w = sl.weight()
            if sl.kind == "fabric":
                fx[sl.rows(), sl.a:sl.b] *= 1.0 + sl.g * w
                continue
            hi = max(sl.a, sl.b - self.window)  # the syncs whose window ends in the span
            span, w = slice(sl.a, hi), w[:hi - sl.a]
            if sl.kind == "route":
                rtt[span] *= 1.0 + sl.g * w
            elif sl.kind == "circuit":
                bw[span] /= 1.0 + sl.g * w
            else:
                j = np.arange(hi - sl.a) + 0.5
                bw[span] /= 1.0 + sl.g * np.sin(math.pi * j / (sl.b - sl.a))
        wl = wu * self.level
        inner = _overlapped(self.inner[self.node] * fx[self.node], self.tail,
                            self.hide * self.dev)
        work = (self.dev + self.host) * wl + self.rest
        out = work + inner
        sync = ((self.lat * rtt + self.vol * np.maximum(1.0 / bw, rtt / self.bdp))
                * self.jit)[at]
        if not self.window:
            out[:, at] += _overlapped(sync, self.wtail, self.behind * self.dev[:, at])
            return np.asarray(out)
        # the window's time, per rank, at the site's healthy all-reduce
        c = np.cumsum(work + _overlapped(self.inner[self.node], self.tail, self.hide * self.dev),
                      axis=1)
        c = np.concatenate([np.zeros((out.shape[0], 1)), c], axis=1)
        room = c[:, at + self.window + 1] - c[:, at + 1]
        use = np.minimum(1.0, sync / room)
        win = at[:, None] + np.arange(1, self.window + 1)  # (syncs, window)
        slower = self.eta * use[:, :, None] * inner[:, win]
        out[:, at + self.window] += _overlapped(sync, self.wtail, room)
        out[:, win] += slower
        return np.asarray(out)


_WAN_PLAN = _NodePlan(
    kinds=WN_KINDS, top=(("route", WN_ROUTE_MAX), ("peak", WN_PEAK_MAX),
                         ("circuit", WN_CIRCUIT_MAX), ("fabric", WN_FABRIC_MAX)),
    restarts=(), every=("route", "peak", "circuit"), climbing=("fabric",), last="fabric",
    climb=WN_CLIMB, last_rise=WN_LAST_RISE)


def _wan(rng: np.random.Generator, scenario: str) -> _Timeline:
    """Training across sites over a wide-area link (module docstring): each rank's busy time,
    every rank waiting at the outer syncs, a site's ranks on its own fabric; the corpus'
    noise is turned off (``noise_scale`` ~ 0)."""
    job = _ranked_job(rng, WN_RANKS, WN_SITE, NODE_COMPUTE, NODE_RANK_JITTER, WN_HOST,
                      WN_HOST_JITTER, min_nodes=2)
    n, t, sites = job.n, job.t, job.nodes
    rest = _node_ckpt_eval(rng, t, job.rate)
    unit = float((job.dev + job.host)[:, LEAD_ITERS:].mean())  # the mean step's work
    ij = float(rng.uniform(*WN_INNER_JITTER))
    inner = float(rng.uniform(*WN_INNER)) * unit * np.exp(
        ij * rng.standard_normal((sites, n)) - 0.5 * ij * ij)
    hide, tail = float(rng.uniform(*WN_HIDE)), float(rng.uniform(*WN_TAIL))
    # the outer step (H inner steps), streamed in fragments or whole; a sync's latency (a
    # halving-doubling across the sites) and volume; H raised, then the volume capped, until
    # a sync costs at most WN_SPIKE x sqrt(its steps) mean steps
    outer = _logint(rng, *WN_OUTER)
    frag = int(rng.choice(WN_FRAGMENTS)) if rng.random() < WN_STREAM_P else 1
    while frag > 1 and outer // frag < WN_FRAGMENT_MIN:
        frag //= 2
    rounds = 2 * math.ceil(math.log2(sites))
    lat = rounds * _loguniform(rng, *WN_LATENCY_S) / job.base_s * unit
    vol = _loguniform(rng, *WN_VOLUME) * unit / frag
    need = math.ceil(((lat + vol) / (WN_SPIKE * unit)) ** 2)
    every = max(outer // frag, min(need, WN_OUTER[1] // frag))
    vol = min(vol, max(0.0, WN_SPIKE * unit * math.sqrt(every) - lat))
    # or hierarchical data parallelism where the sites are close: the sites' all-reduce every
    # step, behind the backward
    hier = bool(rng.random() < WN_HIER_P) and lat < WN_HIER_LAT * unit
    hier_vol = _loguniform(rng, *WN_HIER_VOLUME) * unit
    behind = float(rng.uniform(*WN_HIDE))
    if hier:
        every, vol = 1, hier_vol
    bdp = _loguniform(rng, *WN_BDP)
    wj = float(rng.uniform(*WN_JITTER))
    jit = (np.exp(wj * rng.standard_normal(n) - 0.5 * wj * wj)
           * (1.0 + float(rng.uniform(*WN_PARETO_SCALE))
              * rng.pareto(float(rng.uniform(*WN_PARETO_ALPHA)), n)))
    # the WAN's available bandwidth: a wave (the day, or hourly bulk transfers)
    period = _loguniform(rng, *WN_WAVE_S) / job.base_s
    amp = float(rng.uniform(*WN_WAVE))
    shape = 0.5 * (1.0 - np.cos(2.0 * math.pi * t / period + rng.uniform(0.0, 2.0 * math.pi)))
    overlap = bool(rng.random() < WN_OVERLAP_P) and not hier
    window = min(every, _logint(rng, *WN_WINDOW)) if overlap else 0
    ws = _Sites(node=job.node, dev=job.dev, host=job.host, inner=inner, hide=hide, tail=tail,
                every=every, lat=lat, vol=vol, bdp=bdp, wave=np.ones(n), jit=jit,
                window=window, behind=behind if hier else 0.0,
                wtail=float(rng.uniform(*WN_WTAIL)),
                eta=float(rng.uniform(*WN_ETA)), level=np.ones(n), warm=np.ones(n),
                rest=rest)
    # the wave halved until the mean busy time (moving mean over the whole rounds of syncs
    # nearest 400 steps) moves by less than WN_WAVE_RISE over the series (any span too)
    flat = ws.busy().mean(axis=0)

    def waved(a: float) -> np.ndarray:
        ws.wave = 1.0 - a * shape
        return np.asarray(ws.busy().mean(axis=0))

    if _halved(amp, waved, flat, every * max(1, round(400 / every)), WN_WAVE_HALVINGS,
               WN_WAVE_RISE) is None:
        ws.wave = np.ones(n)
    # planned restarts between parts (another batch: a level; the outer schedule resumes
    # from an outer step); each rank's busy time, labelled by the span's mean rise of every
    # rank (a WAN slowdown: every site waits at the sync) or of a site's ranks (its fabric)
    # over their healthy mean
    return _node_timeline(rng, scenario, job, ws, _WAN_PLAN, WN_RESHAPE_LEVEL)


def _circular_overlap(c1: np.ndarray, c2: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The overlap of ``[0, c1)`` and ``[x, x + c2)`` on a circle of length 1 (``c1``, ``c2``
    at most 1, ``x`` in ``[0, 1)``): the time two transfers that repeat every step share, the
    second starting ``x`` of a step after the first."""
    into = np.maximum(0.0, np.minimum(c1, x + c2) - x)  # before the circle closes ...
    return np.asarray(into + np.minimum(c1, np.maximum(0.0, x + c2 - 1.0)))  # ... and after


@dataclass
class _Links:
    """The draws of a :func:`_pcie` series (arrays ``(ranks, n)``, ``(switches, n)`` or
    ``(n,)``): each rank's PCIe switch, the first and the last rank of that switch (the same
    where it is alone there), its compute (variable-length batches) and host time; its
    transfers per step over its link at the full rate (the batch's copy, the offload, with
    their correctable-error replays), the share of the compute that hides them and their last
    share; the mean step's work, the time an overlapped unit of two transfers loses on the
    switch's upstream (0: it carries both at the full rate) and the phase of each switch's
    second copy after its first per step (a share of the step); the hidden downtraining (its
    rank, -1: none, its first step, its factor on the transfers); the replay storm's factor
    per step; a neighbour's episodes on each switch (each step's key and its traffic, and the
    share of the runs that are episodes); the level, the restarts' warm-ups and the extra
    work (checkpoints, evaluations)."""

    switch: np.ndarray
    first: np.ndarray
    last: np.ndarray
    dev: np.ndarray
    host: np.ndarray
    xfer: np.ndarray
    hide: float
    tail: float
    unit: float
    share: float
    phase: np.ndarray
    hidden: int
    hidden_at: int
    hidden_x: float
    jolt: np.ndarray
    key: np.ndarray
    burst: np.ndarray
    duty: float
    level: np.ndarray
    warm: np.ndarray
    rest: np.ndarray

    def healthy_xfer(self, warm: np.ndarray) -> np.ndarray:
        """Each rank's transfer time per step with the restarts of ``warm``: at the full rate,
        the hidden downtraining's rank ``hidden_x`` times from its first step to the next
        restart (which retrains the link at full width), plus the time the switch's upstream
        costs while the two copies of a switch overlap (:func:`_circular_overlap`, each
        copy's length its share of the mean step's work)."""
        ranks, n = self.xfer.shape
        x = self.xfer.copy()
        if self.hidden >= 0:
            ends = _restart_steps(warm)
            ends = ends[ends > self.hidden_at]
            x[self.hidden, self.hidden_at:int(ends[0]) if ends.size else n] *= self.hidden_x
        c = np.minimum(1.0, x / self.unit)
        ov = _circular_overlap(c[self.first], c[self.last], self.phase[self.switch])
        return np.asarray(x + self.share * self.unit * ov * (self.first != self.last)[:, None])

    def busy(self, slow: tuple[_NodeSlow, ...] = (), warm: np.ndarray | None = None
             ) -> np.ndarray:
        """Each rank's busy time per step under the slowdowns ``slow`` (``warm``: the warm-ups,
        else the series' own): its compute and host time under the warm-up and the level, its
        transfers past the compute that hides them (:func:`_overlapped`) and the extra work.
        On the slowdown's rank (``downtrain``, ``storm``) or switch (``neighbour``, its
        ``node``): ``downtrain`` (the link retrained at a lower width or speed after an error
        burst: its transfers ``2 (1 + g)`` times, until the restart at the span's end),
        ``storm`` (the replays of a degrading link: its transfers ``1 + g h`` times, ``h`` a
        hump, a half sine over the span, times the step's own factor) and ``neighbour``
        (another tenant's or the NIC's traffic on the switch's upstream: its ranks' transfers
        ``1 + g x`` times in the steps of its episodes, whose key is below the duty).  The
        upstream's contention is the healthy one's (a downtrained link asks less of it for
        longer)."""
        wu = self.warm if warm is None else warm
        x = self.healthy_xfer(wu)
        fx = np.ones(x.shape)
        up = np.ones(self.key.shape)
        for sl in slow:
            span = slice(sl.a, sl.b)
            if sl.kind == "downtrain":
                fx[sl.node, span] *= 2.0 * (1.0 + sl.g)
            elif sl.kind == "storm":
                j = np.arange(sl.b - sl.a) + 0.5
                fx[sl.node, span] *= 1.0 + sl.g * np.sin(math.pi * j / (sl.b - sl.a)) * (
                    self.jolt[sl.node, span])
            else:
                up[sl.node, span] *= 1.0 + sl.g * self.burst[sl.node, span] * (
                    self.key[sl.node, span] < self.duty)
        exposed = _overlapped(x * fx * up[self.switch], self.tail, self.hide * self.dev)
        return np.asarray((self.dev + self.host) * (wu * self.level) + exposed + self.rest)


_PCIE_PLAN = _NodePlan(
    kinds=PC_KINDS, top=(("downtrain", PC_DOWN_MAX), ("storm", PC_STORM_MAX),
                         ("neighbour", PC_NEIGHBOUR_MAX)),
    restarts=(("downtrain", "b"),), every=(), climbing=(), last="storm", climb=(1.0, 1.0),
    each_rank=True)


def _pcie(rng: np.random.Generator, scenario: str) -> _Timeline:
    """The host-device PCIe path of each GPU (module docstring): each rank's busy time, a
    rank's link or a switch's two ranks slowed; the corpus' noise is turned off
    (``noise_scale`` ~ 0)."""
    job = _ranked_job(rng, NODE_RANKS, PC_NODE, NODE_COMPUTE, NODE_RANK_JITTER, PC_HOST,
                      PC_HOST_JITTER)
    n, t, ranks = job.n, job.t, job.ranks
    rest = _node_ckpt_eval(rng, t, job.rate)
    # two GPUs of a node behind each switch (one where the node has one)
    m = int(np.count_nonzero(job.node == 0))
    switch = job.node * ((m + 1) // 2) + (np.arange(ranks) % m) // 2
    first = np.searchsorted(switch, switch)
    last = first + np.bincount(switch)[switch] - 1
    # variable-length batches: the compute and the transfers with them
    bj = float(rng.uniform(*PC_BATCH))
    batch = np.exp(bj * rng.standard_normal((ranks, n)) - 0.5 * bj * bj)
    dev = job.dev * batch
    unit = float((dev + job.host)[:, LEAD_ITERS:].mean())  # the mean step's work
    vol = float(rng.uniform(*PC_H2D))
    if rng.random() < PC_OFFLOAD_P:
        vol += float(rng.uniform(*PC_OFFLOAD))
    aer = np.minimum(PC_AER_MAX, float(rng.uniform(*PC_AER))
                     * rng.pareto(float(rng.uniform(*PC_AER_ALPHA)), (ranks, n)))
    xfer = vol * float(dev[:, LEAD_ITERS:].mean()) * batch * (1.0 + aer)
    hide, tail = float(rng.uniform(*PC_HIDE)), float(rng.uniform(*PC_TAIL))
    # the upstream's contention: each switch's second copy drifting against its first
    share = 2.0 / float(rng.uniform(*PC_UPSTREAM)) - 1.0
    switches = int(switch[-1]) + 1
    beat = _loguniforms(rng, *PC_BEAT, switches) * rng.choice([-1.0, 1.0], switches)
    phase = np.mod(rng.random((switches, 1)) + t[None, :] / beat[:, None]
                   + PC_PHASE_JITTER * rng.standard_normal((switches, n)), 1.0)
    hidden = int(rng.integers(0, ranks)) if rng.random() < PC_HIDDEN_P else -1
    hidden_at = int(rng.integers(LEAD_ITERS + 200, n))  # after the first window it is judged on
    sj = float(rng.uniform(*PC_STORM_JITTER))
    jolt = np.exp(sj * rng.standard_normal((ranks, n)) - 0.5 * sj * sj)
    key, burst = _keyed_runs(rng, switches, n, PC_EPISODE, PC_EPISODE_X)
    ln = _Links(switch=switch, first=first, last=last, dev=dev, host=job.host, xfer=xfer,
                hide=hide, tail=tail, unit=unit, share=0.0, phase=phase, hidden=-1,
                hidden_at=hidden_at, hidden_x=1.0, jolt=jolt, key=key, burst=burst,
                duty=float(rng.uniform(*PC_DUTY)), level=np.ones(n), warm=np.ones(n),
                rest=rest)

    # the contention halved until no rank's mean busy time (over 200 steps) moves by
    # PC_BEAT_RISE; a hidden downtraining kept where its rank's moves by less than
    # PC_HIDDEN_RISE (one try: half the rate, or none)
    def contended(x: float) -> np.ndarray:
        ln.share = x
        return ln.busy()

    if _halved(share, contended, contended(0.0), 200, PC_BEAT_HALVINGS, PC_BEAT_RISE) is None:
        ln.share = 0.0
    flat = ln.busy()

    def downtrained(x: float) -> np.ndarray:
        ln.hidden, ln.hidden_x = hidden, 1.0 + x
        return ln.busy()

    if hidden < 0 or _halved(1.0, downtrained, flat, 200, 1, PC_HIDDEN_RISE) is None:
        ln.hidden = -1
    # planned restarts between parts (another batch: a level; the link retrained at full
    # width); each rank's busy time, labelled by the span's mean rise of the rank whose link
    # is slowed, or of the switch's ranks, over their healthy mean
    return _node_timeline(rng, scenario, job, ln, _PCIE_PLAN, PC_RESHAPE_LEVEL,
                          groups=tuple(np.arange(r, r + 1) for r in range(ranks)),
                          kind_groups={"neighbour": tuple(np.flatnonzero(switch == j)
                                                          for j in range(switches))})


@dataclass
class _Vms:
    """The draws of a :func:`_steal` series (arrays ``(ranks, n)``, ``(vms, n)`` or ``(vms,)``):
    each rank's VM, its compute at the device's rate, its launch thread's CPU time per step,
    the share of the compute by which the launch queue runs ahead of the device and the launch
    thread's last share (which always shows), its loader's CPU time per batch over its workers;
    each rank's phase against the co-tenants' time slices per step and a time slice
    (busy-time units); each VM's own demand on its host and its co-tenants' healthy demand
    (host CPUs' worth: a level and a variation in log space, the variation times ``scale``);
    the maintenance's dirty-page overhead on each VM's CPU work (times ``scale``) and its
    blackouts (busy-time units) per VM and step; a migration's pre-copy (steps), its
    overhead and its blackout; a neighbour's episodes (each step's key and its demand, per
    VM, and the share of the runs that are episodes); the level, the restarts' warm-ups and
    the extra work (checkpoints, evaluations)."""

    node: np.ndarray
    dev: np.ndarray
    host: np.ndarray
    hide: float
    tail: float
    feed: np.ndarray
    phase: np.ndarray
    quantum: float
    own: np.ndarray
    other: np.ndarray
    vary: np.ndarray
    scale: float
    dirty: np.ndarray
    frozen: np.ndarray
    pre: int
    pre_dirty: float
    blackout: float
    key: np.ndarray
    burst: np.ndarray
    duty: float
    level: np.ndarray
    warm: np.ndarray
    rest: np.ndarray

    def busy(self, slow: tuple[_NodeSlow, ...] = (), warm: np.ndarray | None = None,
             frozen: bool = True) -> np.ndarray:
        """Each rank's busy time per step under the slowdowns ``slow`` (``warm``: the warm-ups,
        else the series' own; ``frozen`` False: without the blackouts).  Each VM's host is
        asked for ``rho`` = its own demand plus its co-tenants' (host CPUs' worth); past 1 the
        hypervisor shares the physical CPUs fairly, so every vCPU runs ``1 / rho`` of the time
        it is runnable (the steal ``1 - 1 / rho``).  The launch thread's CPU time ``h`` (the
        dirty-page overhead on it) then waits for the co-tenants' time slices: ``q floor(phase
        + h (rho - 1) / q)`` more (its mean ``h (rho - 1)``; whole slices now and then where
        ``h`` is short, a level where it is long), shown past the launch queue's lead
        (:func:`_overlapped`); the loader's workers, many and always runnable, take ``rho``
        times their CPU time, which binds the step once it passes the device's; a blackout
        freezes the VM (its steps that long more).  On the slowdown's VM over its span:
        ``neighbour`` (a co-tenant's demand ``g x`` in the steps of its episodes, whose key is
        below the duty), ``packing`` (``k`` tenants placed on the host one after another,
        evenly over the climb, each ``g / k``; ``k`` from the aim) and ``migrated`` (a live
        migration: a pre-copy of at most half the span with its dirty-page overhead, a
        blackout, then a busier host, ``g`` more, until the restart at the span's end)."""
        wu = self.warm if warm is None else warm
        rho = self.own[:, None] + self.other[:, None] * np.exp(self.scale * self.vary)
        dirty = 1.0 + self.scale * self.dirty
        frz = self.frozen.copy()
        for sl in slow:
            rows = sl.rows()
            if sl.kind == "neighbour":
                span = slice(sl.a, sl.b)
                rho[rows, span] += sl.g * self.burst[rows, span] * (
                    self.key[rows, span] < self.duty)
            elif sl.kind == "packing":
                k = ST_PACK[0] + int(sl.aim * (ST_PACK[1] - ST_PACK[0] + 1))
                rho[rows, sl.a:sl.b] += sl.g * np.ceil(k * sl.weight() - 1e-9) / k
            else:
                at = sl.a + min(self.pre, (sl.b - sl.a) // 2)
                dirty[rows, sl.a:at] *= 1.0 + self.pre_dirty
                frz[rows, at] += self.blackout
                rho[rows, at:sl.b] += sl.g
        over = np.maximum(rho, 1.0)[self.node] - 1.0
        dx = dirty[self.node]
        cpu = self.host * dx
        lumps = self.quantum * np.floor(self.phase + cpu * over / self.quantum)
        exposed = _overlapped(cpu + lumps, self.tail, self.hide * self.dev)
        work = np.maximum(self.dev + exposed, self.feed * dx * (1.0 + over))
        out = work * (wu * self.level) + self.rest
        return np.asarray(out + frz[self.node] if frozen else out)


_STEAL_PLAN = _NodePlan(
    kinds=ST_KINDS, top=(("neighbour", ST_DEMAND_MAX), ("packing", ST_DEMAND_MAX),
                         ("migrated", ST_DEMAND_MAX)),
    restarts=(("migrated", "b"),), every=(), climbing=("packing",), last="packing",
    climb=ST_CLIMB, aimed=True, each_rank=True)


def _steal(rng: np.random.Generator, scenario: str) -> _Timeline:
    """A cloud VM's steal time (module docstring): each rank's busy time, the ranks of a VM
    slowed together; the corpus' noise is turned off (``noise_scale`` ~ 0)."""
    job = _ranked_job(rng, NODE_RANKS, ST_VM, NODE_COMPUTE, NODE_RANK_JITTER, ST_HOST,
                      ST_HOST_JITTER)
    n, t, ranks, vms = job.n, job.t, job.ranks, job.nodes
    m = int(np.count_nonzero(job.node == 0))
    rest = _node_ckpt_eval(rng, t, job.rate)
    hide, tail = float(rng.uniform(*ST_HIDE)), float(rng.uniform(*ST_TAIL))
    unit = float((job.dev + job.host)[:, LEAD_ITERS:].mean())  # the mean step's work
    per_s = unit / job.base_s  # busy-time units per second
    fj = float(rng.uniform(*ST_FEED_JITTER))
    feed = float(rng.uniform(*ST_FEED)) * unit * np.exp(fj * rng.standard_normal((ranks, n))
                                                        - 0.5 * fj * fj)
    # each VM on its own host: its own demand (its share of the host's GPUs and CPUs, its
    # vCPUs' use) and its co-tenants' (the rest of the host's healthy demand), which wanders,
    # changes as tenants come and go, and follows the day
    own = m / ST_HOST_GPUS * rng.uniform(*ST_UTIL, vms)
    other = np.maximum(0.05, rng.uniform(*ST_LOAD, vms) - own)
    sd, phi = float(rng.uniform(*ST_WANDER_SD)), float(rng.uniform(*ST_WANDER_PHI))
    wander = lfilter([sd * math.sqrt(1.0 - phi * phi)], [1.0, -phi],
                     rng.standard_normal((vms, n)), axis=1)
    key, _one = _keyed_runs(rng, vms, n, ST_TENANCY, (1.0, 1.0))
    tenancy = ST_TENANT_SD * ndtri(np.clip(key, 1e-9, 1.0 - 1e-9))
    wave = float(rng.uniform(*ST_WAVE)) * np.sin(
        2.0 * math.pi * t * job.base_s / _loguniform(rng, *ST_WAVE_S)
        + rng.uniform(0.0, 2.0 * math.pi))
    quantum = _loguniform(rng, *ST_QUANTUM_S) * per_s
    # the provider's live migrations: a pre-copy (dirty-page logging), then a blackout
    pre = max(1, math.ceil(_loguniform(rng, *ST_PRECOPY_S) / job.base_s))
    pre_dirty = float(rng.uniform(*ST_DIRTY))
    dirty, frozen = np.zeros((vms, n)), np.zeros((vms, n))
    if rng.random() < ST_MAINT_P:
        for _ in range(int(rng.integers(ST_MAINT[0], ST_MAINT[1] + 1))):
            v, s0 = int(rng.integers(0, vms)), int(rng.integers(1, n))
            dirty[v, s0:s0 + pre] += pre_dirty
            if s0 + pre < n:
                frozen[v, s0 + pre] += _loguniform(rng, *ST_BLACKOUT_S) * per_s
    key, burst = _keyed_runs(rng, vms, n, ST_EPISODE, ST_EPISODE_X)
    vm = _Vms(node=job.node, dev=job.dev, host=job.host, hide=hide, tail=tail, feed=feed,
              phase=rng.random((ranks, n)), quantum=quantum, own=own, other=other,
              vary=wander + tenancy + wave[None, :], scale=1.0, dirty=dirty, frozen=frozen,
              pre=pre, pre_dirty=pre_dirty,
              blackout=_loguniform(rng, *ST_BLACKOUT_S) * per_s, key=key, burst=burst,
              duty=float(rng.uniform(*ST_DUTY)), level=np.ones(n), warm=np.ones(n),
              rest=rest)

    # the co-tenants' variation and the maintenance's overhead halved until no rank's mean
    # busy time (over 200 steps, the blackouts left out) moves by ST_RISE
    def varied(x: float) -> np.ndarray:
        vm.scale = x
        return vm.busy(frozen=False)

    if _halved(1.0, varied, varied(0.0), 200, ST_HALVINGS, ST_RISE) is None:
        vm.scale = 0.0
    # planned restarts between parts (another batch: a level); each rank's busy time,
    # labelled by the span's mean rise of its VM's ranks over their healthy mean
    return _node_timeline(rng, scenario, job, vm, _STEAL_PLAN, ST_RESHAPE_LEVEL)


def _part_rooms(rng: np.random.Generator, scenario: str, starts: np.ndarray, part: int,
                restarted: np.ndarray, more_p: float, settle: int, clear: int
                ) -> Iterator[tuple[int, int, int]]:
    """The parts of a series (``starts``, each ``part`` steps long, ``restarted``: whether it
    begins with a planned restart) that get a slowdown, as ``(part, first step, end)``: in a
    ``slow`` scenario the first part always, each other one with chance ``more_p``; the room
    starts ``settle`` steps after a restart and ends ``clear`` steps before the next one (else
    40 steps before the next part).  Shared by :func:`_moe`, :func:`_hw_queue` and
    :func:`_compile`."""
    k = len(starts)
    for j in range(k):
        if scenario != "slow" or (j > 0 and rng.random() >= more_p):
            continue
        lo = int(starts[j]) + (settle if restarted[j] else 0)
        yield j, lo, int(starts[j]) + part - (clear if j + 1 < k and restarted[j + 1] else 40)


def _restart_counterfactual(warm: np.ndarray, at: tuple[tuple[int, tuple[float, float, float]],
                                                        ...],
                            whole: Callable[[np.ndarray], np.ndarray], it: np.ndarray,
                            events: list[tuple[int, int, float, str]]
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A slowdown that comes with restarts (``at``: each step and its warm-up): the warm-ups
    with them, the healthy step times with the same restarts (``whole(warm-ups)``) and those
    times with the slowdowns already placed (``events`` of ``it``, earlier parts) kept."""
    hw = warm.copy()
    for t0, how in at:
        _moe_rewarm(hw, t0, how)
    base = whole(hw)
    y0 = base.copy()
    for lo_e, hi_e, _r, _k in events:  # earlier parts: before the restarts
        y0[lo_e:hi_e] = it[lo_e:hi_e]
    return hw, base, y0


def _visible_rise(found: tuple[int, int, np.ndarray, float] | None, base: np.ndarray,
                  least: float, most: float, min_iters: int, decidable: float,
                  after: bool = True) -> tuple[int, int, np.ndarray, float] | None:
    """A solved rise (:func:`_solve_rise`) kept where it is decidable (:func:`_decidable_rise`
    over the healthy ``base``) and above the healthy steps around it (:func:`_hd_visible`;
    ``after`` False: before it only, where a restart follows it): ``(start, end, step times,
    loss)``, or None."""
    if found is None:
        return None
    lo, hi, y, _g = found
    r = _decidable_rise(y, lo, hi, float(base[lo:hi].mean()), least, most, min_iters,
                        decidable)
    if r is None or not _hd_visible(base, y, lo, hi, after):
        return None
    return lo, hi, y, r


def _comm_rest(rng: np.random.Generator, n: int, comm: tuple[float, float],
               jitter: tuple[float, float]) -> np.ndarray:
    """The exposed all-reduce of each of ``n`` steps: a level drawn in ``comm`` (mean-step
    units) with a log-normal jitter (its sd drawn in ``jitter``) of mean 1."""
    c = float(rng.uniform(*comm))
    cj = float(rng.uniform(*jitter))
    return c * np.exp(cj * rng.standard_normal(n) - 0.5 * cj * cj)


def _with_ckpt_eval(rng: np.random.Generator, t: np.ndarray, rest: np.ndarray,
                    scale: np.ndarray, every_range: tuple[int, int],
                    iters: tuple[int, int], x: tuple[float, float],
                    eval_every: tuple[int, ...], eval_x: tuple[float, float],
                    unit: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``rest`` plus checkpoints (one every ``every_range`` steps, ``iters`` steps of it
    ``x`` times the step's ``scale`` x ``unit``; none at step 0) and evaluations (every
    ``eval_every``-th step adds ``eval_x`` x ``unit``, log-uniform), and which steps
    evaluate."""
    every = int(rng.integers(every_range[0], every_range[1] + 1))
    ck = t // every
    ck_len = rng.integers(iters[0], iters[1] + 1, int(ck[-1]) + 1)
    ck_x = _loguniforms(rng, *x, ck_len.size)
    rest = rest + np.where((ck > 0) & (t % every < ck_len[ck]), (ck_x[ck] - 1.0) * scale * unit,
                           0.0)
    ev = int(rng.choice(eval_every))
    at = t % ev == ev - 1
    rest[at] += unit * _loguniforms(rng, *eval_x, int(at.sum()))
    return rest, at


def _changed_span(y: np.ndarray, ref: np.ndarray, a: int, b: int, faster: bool = False
                  ) -> tuple[int, int, np.ndarray]:
    """``(first, end, y)``: the steps of ``[a, b)`` where ``y`` is slower than ``ref`` (by
    more than 1e-9 of it; ``faster``: where it differs either way), from the first to the
    last; ``(a, a, y)`` where none is."""
    seg, r = y[a:b], ref[a:b]
    diff = np.flatnonzero(np.abs(seg - r) > 1e-9 * r if faster else seg > r * (1.0 + 1e-9))
    if diff.size == 0:
        return a, a, y
    return a + int(diff[0]), a + int(diff[-1]) + 1, y


def _restarted_timeline(healthy: np.ndarray, factor: np.ndarray,
                        events: list[tuple[int, int, float, str]],
                        pauses: list[tuple[int, float]],
                        who: list[tuple[int, ...]] | None = None) -> _Timeline:
    """:func:`_quiet_timeline` with the downtime of each planned restart ``(step,
    seconds)``."""
    tl = _quiet_timeline(healthy, factor, events, who)
    for at_t, d in pauses:
        tl.pause[at_t] += d
    tl.restarts = len(pauses)
    return tl


def _solve_rise(trial: Callable[[float], tuple[int, int, np.ndarray]], mean: float, s: float,
                lo_g: float, hi_g: float, base: np.ndarray | None = None, steps: int = 40
                ) -> tuple[int, int, np.ndarray, float] | None:
    """The size ``g`` in ``[lo_g, hi_g]`` of a slowdown whose span (``trial(g)``: start, end,
    times) rises by ``s`` over ``mean`` (``base`` given: over the mean of ``base`` over the
    span, its healthy times), by bisection (the rise grows with ``g``; ``steps`` halvings):
    ``(start, end, times, g)``, or None where even ``hi_g`` falls short.  Shared by
    :func:`_dl_slowdown`, :func:`_ll_degrade`, :func:`_gc_slow`, :func:`_hd_slow`,
    :func:`_moe`, :func:`_hw_queue` and :func:`_compile`."""

    def rise(g: float) -> float:
        lo, hi, y = trial(g)
        if hi - lo < MIN_EVENT_ITERS:
            return 0.0
        ref = mean if base is None else float(base[lo:hi].mean())
        return float(y[lo:hi].mean() / ref - 1.0)

    if rise(hi_g) < s:
        return None
    for _ in range(steps):
        mid = 0.5 * (lo_g + hi_g)
        lo_g, hi_g = (mid, hi_g) if rise(mid) < s else (lo_g, mid)
    return (*trial(hi_g), hi_g)


def _decidable_rise(y: np.ndarray, lo: int, hi: int, mean: float, least: float, most: float,
                    min_iters: int, decidable: float) -> float | None:
    """The rise over ``mean`` of the span ``y[lo:hi]`` where it is a label: between ``least``
    and ``most``, at least ``min_iters`` long, and ``decidable`` times its variance over the
    rise squared (the rise that many standard errors of the span's mean); else None."""
    seg = y[lo:hi] / mean
    r = float(seg.mean() - 1.0)
    if (least <= r <= most and hi - lo >= min_iters
            and hi - lo >= decidable * float(seg.var()) / r ** 2):
        return r
    return None


_BUILDERS: dict[str, Callable[[np.random.Generator, str], _Timeline]] = {
    "restart": _restart, "ckpt_stall": _ckpt_stall, "flapping": _flapping,
    "staircase": _staircase, "noise_regime": _noise_regime, "multirank": _multirank,
    "greyhound": _greyhound, "failslow": _failslow, "ramp": _thermal, "short": _short,
    "hump": _hump, "warmup_onset": _warmup_onset, "reconfig": _reconfig,
    "ckpt_burst": _ckpt_burst, "contention": _contention, "megatron": _megatron,
    "bimodal_replay": _bimodal_replay, "ladder": _ladder, "seqlen": _seqlen, "accum": _accum,
    "memory": _memory, "prefetch": _prefetch, "pipeline": _pipeline,
    "lossy_link": _lossy_link, "gc_pause": _gc_pause, "dispatch": _dispatch, "moe": _moe,
    "hw_queue": _hw_queue, "compile": _compile, "power": _power, "numa": _numa,
    "rollout": _rollout, "fabric": _fabric, "nvme": _nvme, "observe": _observe, "wan": _wan,
    "pcie": _pcie, "steal": _steal,
}


# -- from the timeline to records ---------------------------------------------------------------
def _noise(rng: np.random.Generator, n: int, scale: float | np.ndarray) -> np.ndarray:
    df = int(rng.integers(NOISE_DF[0], NOISE_DF[1] + 1))
    phi = rng.uniform(*NOISE_PHI)
    z = rng.standard_t(df, n) / math.sqrt(df / (df - 2))
    e = lfilter([math.sqrt(1.0 - phi * phi)], [1.0, -phi], z)
    return np.asarray(e * scale)


def _finish(rng: np.random.Generator, tl: _Timeline, *, name: str, family: str,
            scenario: str, seed: int, stride: int = 1, mean: bool = False) -> JobSeries:
    ranks, n = tl.factor.shape
    per_rank = np.broadcast_to(tl.healthy, tl.factor.shape)  # healthy: (n,) or (ranks, n)
    clean = per_rank * tl.factor  # (ranks, n)
    dur = np.empty_like(clean)
    for r in range(ranks):  # a handful of ranks: one vectorised draw each
        scale = tl.noise_scale if tl.noise_scale is not None else rng.uniform(*NOISE_SCALE)
        spikes = np.ones(n)
        hit = np.asarray(rng.random(n) < rng.uniform(*SPIKE_RATE))
        spikes[hit] = _loguniforms(rng, *SPIKE_FACTOR, int(np.count_nonzero(hit)))
        dur[r] = clean[r] * np.exp(_noise(rng, n, scale)) * spikes
    ts = np.cumsum(dur + tl.pause[None, :], axis=1) + rng.uniform(1e9, 2e9)
    if stride > 1:
        at = np.flatnonzero(tl.iters % stride == 0)
        if mean:
            csum = np.concatenate([np.zeros((ranks, 1)), np.cumsum(dur, axis=1)], axis=1)
            cl = np.concatenate([np.zeros((ranks, 1)), np.cumsum(clean, axis=1)], axis=1)
            hsum = np.concatenate([[0.0], np.cumsum(tl.healthy)])
            lo = np.maximum(at - stride + 1, 0)
            vals = (csum[:, at + 1] - csum[:, lo]) / (at + 1 - lo)
            level = (cl[:, at + 1] - cl[:, lo]) / (at + 1 - lo)
            healthy = np.broadcast_to((hsum[at + 1] - hsum[lo]) / (at + 1 - lo), level.shape)
        else:
            vals, level = dur[:, at], clean[:, at]
            healthy = np.broadcast_to(tl.healthy[at], level.shape)
        tsv = ts[:, at]
        iters = tl.iters[at]
        protect = tl.protect[at]
    else:
        vals, level, tsv, iters, protect = dur, clean, ts, tl.iters, tl.protect
        healthy = per_rank
    m = iters.size
    keep = np.ones((ranks, m), dtype=bool)
    dropped = 0
    if family in MISSING_FAMILIES:
        for r in range(ranks):
            for _ in range(int(rng.integers(MISSING_RUNS[0], MISSING_RUNS[1] + 1))):
                length = _logint(rng, *MISSING_LEN)
                a = int(rng.integers(LEAD_ITERS, max(LEAD_ITERS + 1, m - length - 1)))
                if not protect[max(0, a - 2):a + length + 2].any():
                    keep[r, a:a + length] = False
        dropped = int((~keep).sum())
    fields = "both"
    if family not in ("sampled", "multirank"):
        fields = "ts" if rng.random() < TS_ONLY_P else "both"
        if fields == "both" and tl.restarts == 0 and rng.random() < 0.2:
            fields = "duration"
    if family == "sampled" and mean and rng.random() < 0.3:
        fields = "ts"  # a mean of k iterations is what a timestamp difference gives
    # feed order: executed iteration, then rank
    order_t, order_r = np.nonzero(keep.T)
    rank = order_r.astype(np.int64)
    it = iters[order_t].astype(np.int64)
    tsr = tsv[order_r, order_t]
    du = vals[order_r, order_t]
    if fields == "duration":
        tsr = np.full(tsr.size, math.nan)
    elif fields == "ts":
        du = np.full(du.size, math.nan)
    return JobSeries(name=name, family=family, scenario=scenario, seed=seed, rank=rank,
                     iter=it, ts=tsr, duration=du, stride=stride, mean_of_stride=mean,
                     events=tuple(sorted(tl.events, key=lambda e: (e.start_iter, e.end_iter))),
                     level=level[order_r, order_t], healthy=healthy[order_r, order_t],
                     ranks=ranks, restarts=tl.restarts, dropped=dropped)


def generate_series(seed: int, family: str, scenario: str, index: int) -> JobSeries:
    """Series ``index`` of ``family``/``scenario`` for ``seed``."""
    fi = FAMILIES.index(family)
    si = [s for f, s, _, _ in SCENARIOS if f == family].index(scenario)
    rng = np.random.default_rng([seed, fi, si, index])
    name = f"{family}/{scenario}/{index:03d}"
    if family == "sampled":
        stride = int(rng.choice(SAMPLE_STRIDES))
        tl = _sampled(rng, scenario, stride)
        return _finish(rng, tl, name=name, family=family, scenario=scenario, seed=seed,
                       stride=stride, mean=scenario.startswith("mean"))
    tl = _BUILDERS[family](rng, scenario)
    return _finish(rng, tl, name=name, family=family, scenario=scenario, seed=seed)


def scenario_counts(scale: float = 1.0) -> list[tuple[str, str, int]]:
    """``(family, scenario, series)`` at ``scale`` (at least one series per scenario)."""
    return [(f, s, max(1, int(round(c * scale)))) for f, s, c, _ in SCENARIOS]


def generate_job_corpus(seed: int = 0, scale: float = 1.0,
                        families: tuple[str, ...] | None = None) -> list[JobSeries]:
    """Every series of the corpus for ``seed`` (``families``: only these)."""
    out = []
    for f, s, count in scenario_counts(scale):
        if families is not None and f not in families:
            continue
        out += [generate_series(seed, f, s, i) for i in range(count)]
    return out


# -- call records of a job that restarts and is reconfigured (iteration counting) ---------------
CALL_BUCKETS = (2, 6)  # data-parallel all-reduce buckets per iteration
CALL_GATHERS = (0, 4)  # tensor-parallel all-gathers per iteration
CALL_ITER_S = (0.05, 1.0)  # iteration time (log-uniform)
CALL_NOISE = 0.02  # relative iteration-time noise
CALL_STARTUP = (5, 40)  # broadcasts at every (re)start, before the first step (step -1)
CALL_SEGMENT_ITERS = (800, 2500)  # iterations run between two restarts


@dataclass(frozen=True)
class CallJob:
    """Call records of one job (:func:`generate_call_job`), in time order, and the truth:
    the iterations each rank executed (replayed ones included), and how many segments."""

    records: tuple[CallRecord, ...]
    executed: dict[int, int]
    segments: int
    job_iterations: int  # distinct training steps run (1 to the last)


def _call_pattern(rng: np.random.Generator) -> list[tuple[str, int]]:
    """The calls of one iteration: all-gathers, then the gradient buckets' all-reduces."""
    gathers = int(rng.integers(CALL_GATHERS[0], CALL_GATHERS[1] + 1))
    buckets = int(rng.integers(CALL_BUCKETS[0], CALL_BUCKETS[1] + 1))
    gsize = int(rng.integers(1, 64)) << 20
    return ([("all_gather", gsize)] * gathers
            + [("all_reduce", int(rng.integers(1, 128)) << 20) for _ in range(buckets)])


def generate_call_job(seed: int, *, ranks: int = 2, restarts: int = 3,
                      with_step: bool = True) -> CallJob:
    """Call records of a data-parallel job that restarts ``restarts`` times.  Each start
    broadcasts the parameters (calls before the first step, ``step`` -1), and every restart
    resumes from the last checkpoint (it replays up to a checkpoint interval of iterations)
    after a downtime, half of them reconfigured: other bucket sizes and counts, another
    number of all-gathers, another iteration time.  ``with_step``: the records carry the
    training step, as the probe writes them."""
    rng = np.random.default_rng([seed, 29])
    out: list[tuple[float, int, CallRecord]] = []
    executed = dict.fromkeys(range(ranks), 0)
    pattern = _call_pattern(rng)
    base = _loguniform(rng, *CALL_ITER_S)
    t0, step, ckpt = float(rng.uniform(1e9, 2e9)), 1, int(rng.choice(CKPT_INTERVAL))
    top = 0
    for seg in range(restarts + 1):
        if seg:
            t0 += float(rng.uniform(*RESTART_DOWNTIME_S))
            step = max(1, ((step - 1) // ckpt) * ckpt + 1)  # back to the last checkpoint
            if rng.random() < 0.5:  # reconfigured
                pattern = _call_pattern(rng)
                base *= float(rng.uniform(0.7, 1.4))
        startup = int(rng.integers(CALL_STARTUP[0], CALL_STARTUP[1] + 1))
        length = int(rng.integers(CALL_SEGMENT_ITERS[0], CALL_SEGMENT_ITERS[1] + 1))
        sizes = rng.integers(1, 256, startup) << 16
        durs = base * np.exp(rng.normal(0.0, CALL_NOISE, length))
        starts = t0 + 0.5 + np.concatenate([[0.0], np.cumsum(durs)[:-1]])
        offsets = (np.arange(len(pattern)) + 0.5) / len(pattern)
        for r in range(ranks):
            for j, size in enumerate(sizes.tolist()):
                out.append((t0 + 0.01 * j, r, CallRecord(
                    rank=r, type="broadcast", size=size, ts=t0 + 0.01 * j,
                    step=-1 if with_step else None)))
            at = starts[:, None] + offsets[None, :] * durs[:, None] + 1e-4 * r
            for i in range(length):
                for (typ, size), ts in zip(pattern, at[i].tolist(), strict=True):
                    out.append((ts, r, CallRecord(rank=r, type=typ, size=size, ts=ts,
                                                  step=step + i if with_step else None)))
            executed[r] += length
        t0 = float(starts[-1] + durs[-1])
        step += length
        top = max(top, step - 1)
    out.sort(key=lambda x: (x[0], x[1]))
    return CallJob(records=tuple(c for _, _, c in out), executed=executed,
                   segments=restarts + 1, job_iterations=top)
