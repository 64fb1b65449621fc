//! One pipeline stage (a rank) on its GPU: its model chunks (one, or V under an interleaved
//! schedule, each a virtual stage of `layers / V` layers, `chunk`), each layer y =
//! layernorm(x W) (hidden H, T tokens per microbatch), with what backward needs kept per
//! microbatch. The model's last chunk's loss is
//! 0.5 ||y - t||^2 with t a fixed seeded target: 0.5 ||y||^2 alone is constant under a
//! layernorm without affine part (its gradient is eps / (var + eps) y, about 1e-5 y), so its
//! gradients would be rounding noise and no check could tell a right one from a wrong one.
//! F runs a chunk's layers forward;
//! B computes the input gradient (layernorm backward, then dZ W^T) and keeps dZ; W adds
//! X^T dZ into each layer's weight gradient. With backward fused (1F1B), B does both.
//! Every kernel is verified in `tests/train_kernels.rs`; after a run, the weight gradients
//! are checked against an f64 reference of the same layers and inputs ([`Stage::verify`]).

use std::time::Instant;

use anyhow::{anyhow, Result};

use super::chunk::{storage, Chunk, Kernels};
use super::shape::Shape;
use crate::gpu::kernels::{record_untimed, DispatchPass};
use crate::gpu::timing::PassTimer;
use crate::gpu::Gpu;
use crate::sim::Layout;

pub struct Stage {
    pub gpu: Gpu,
    pub shape: Shape,
    /// The rank.
    pub index: u32,
    /// The model's chunks on this rank under each layout the run's cases use (one chunk per
    /// rank, interleaved, ...): each a model of its own, built up front.
    models: Vec<(Layout, Vec<Chunk>)>,
    /// Which of `models` the ops run on ([`Stage::use_layout`]).
    active: usize,
    /// Scratch for Z = X W (consumed by layernorm at once).
    _z: wgpu::Buffer,
    staging: wgpu::Buffer,
    /// Timestamps at the start and end of each op's pass (one slot per op since
    /// [`Stage::start_timing`]), where the device has them.
    timer: Option<PassTimer>,
    /// Slots used since [`Stage::start_timing`] (a `Cell`: ops borrow a chunk meanwhile).
    slots: std::cell::Cell<u32>,
}

impl Stage {
    /// Builds rank `index` of `stages` for each of `layouts`: one chunk per virtual stage the
    /// rank runs, the rank's `shape.layers` split evenly between them.
    pub fn new(
        gpu: Gpu,
        shape: Shape,
        index: u32,
        stages: u32,
        layouts: &[Layout],
    ) -> Result<Stage> {
        let kernels = Kernels::new(&gpu, &shape)?;
        let z = storage(&gpu, "stage z", shape.elements());
        let mut models = Vec::new();
        for &layout in layouts {
            let v = layout.chunks() as u32;
            if v == 0 || !shape.layers.is_multiple_of(v) {
                return Err(anyhow!(
                    "--layers {}: {v} model chunks per stage need a multiple of {v} layers",
                    shape.layers
                ));
            }
            let chunks = (0..v as usize)
                .map(|c| {
                    let vs = layout.virtual_stage(stages as usize, index as usize, c) as u32;
                    Chunk::new(
                        &gpu,
                        &kernels,
                        (&shape, shape.layers / v),
                        (vs, stages * v),
                        &z,
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            models.push((layout, chunks));
        }
        let most = models.iter().map(|m| m.1.len() as u32).max().unwrap_or(1);
        let staging = gpu.staging(
            "stage send",
            (shape.elements() * 4) as u64,
            wgpu::MapMode::Read,
        );
        // An iteration runs at most F, B and W of every microbatch on every chunk.
        let timer = gpu
            .has_timestamps()
            .then(|| PassTimer::new(&gpu, 3 * shape.microbatches * most));
        Ok(Stage {
            gpu,
            shape,
            index,
            models,
            active: 0,
            _z: z,
            staging,
            timer,
            slots: Default::default(),
        })
    }

    /// Runs the next ops on the model built for `layout`.
    pub fn use_layout(&mut self, layout: Layout) -> Result<()> {
        self.active = self
            .models
            .iter()
            .position(|m| m.0 == layout)
            .ok_or_else(|| anyhow!("stage {} was not built for {layout:?}", self.index))?;
        Ok(())
    }

    fn chunks(&self) -> &[Chunk] {
        &self.models[self.active].1
    }

    /// Starts a new sequence of timestamped ops (slot 0 is the next op's).
    pub fn start_timing(&mut self) {
        self.slots.set(0);
    }

    /// The GPU's (start, end) of each op since [`Stage::start_timing`], in µs on the GPU's
    /// clock; `None` without timestamps, or when more ops ran than there are slots.
    pub fn gpu_spans(&self, ops: usize) -> Result<Option<Vec<(f64, f64)>>> {
        match &self.timer {
            Some(t) if self.slots.get() as usize == ops && ops > 0 => {
                Ok(Some(t.read_absolute(&self.gpu, self.slots.get())?))
            }
            _ => Ok(None),
        }
    }

    /// Zeroes the weight gradients (each iteration accumulates over its microbatches).
    pub fn zero_grads(&self) -> Result<()> {
        let zeros = vec![0u8; (self.shape.hidden * self.shape.hidden * 4) as usize];
        for l in self.chunks().iter().flat_map(|c| &c.layers) {
            self.gpu.queue.write_buffer(&l.grad, 0, &zeros);
        }
        let idx = self.gpu.queue.submit([]);
        self.gpu.wait(idx)?;
        Ok(())
    }

    fn chunk(&self, chunk: usize) -> Result<&Chunk> {
        self.chunks().get(chunk).ok_or_else(|| {
            anyhow!(
                "stage {} has {} model chunk(s), not a chunk {chunk}",
                self.index,
                self.chunks().len()
            )
        })
    }

    fn chunk_mut(&mut self, chunk: usize) -> &mut Chunk {
        &mut self.models[self.active].1[chunk]
    }

    /// F of `chunk` for `mb`: writes the input (given, or the model's first chunk's own), runs
    /// every layer.
    pub fn forward(&mut self, chunk: usize, mb: u32, input: Option<Vec<f32>>) -> Result<()> {
        let m = mb as usize;
        let c = self.chunk(chunk)?;
        let x = match input {
            Some(x) => x,
            None if c.first => super::shape::input(&self.shape, mb),
            None => {
                return Err(anyhow!(
                    "stage {} ran F {mb} of virtual stage {} without its input",
                    self.index,
                    c.virtual_stage
                ))
            }
        };
        self.gpu
            .queue
            .write_buffer(&c.inputs[m], 0, bytemuck::cast_slice(&x));
        let passes: Vec<&DispatchPass> = c
            .layers
            .iter()
            .flat_map(|l| [&l.fwd[m].0, &l.fwd[m].1])
            .collect();
        submit(&self.gpu, self.timer.as_ref(), &self.slots, &passes)?;
        self.chunk_mut(chunk).seen_inputs[m] = Some(x);
        Ok(())
    }

    /// B of `chunk` for `mb` (and W when `fused`): dY given by the next virtual stage, or from
    /// the loss on the model's last chunk.
    pub fn backward(
        &mut self,
        chunk: usize,
        mb: u32,
        dy: Option<Vec<f32>>,
        fused: bool,
    ) -> Result<()> {
        let m = mb as usize;
        let c = self.chunk(chunk)?;
        if let Some(d) = &dy {
            self.gpu
                .queue
                .write_buffer(&c.dy[m], 0, bytemuck::cast_slice(d));
        } else if !c.last {
            return Err(anyhow!(
                "stage {} ran B {mb} of virtual stage {} without its gradient",
                self.index,
                c.virtual_stage
            ));
        }
        let mut passes: Vec<&DispatchPass> = Vec::new();
        if c.last {
            passes.push(&c.loss_grad[m]);
        }
        for l in c.layers.iter().rev() {
            passes.push(&l.bwd[m].0);
            passes.push(&l.bwd[m].1);
        }
        if fused {
            passes.extend(c.layers.iter().map(|l| &l.wgrad[m]));
        }
        submit(&self.gpu, self.timer.as_ref(), &self.slots, &passes)?;
        self.chunk_mut(chunk).seen_dy[m] = dy;
        Ok(())
    }

    /// W of `chunk` for `mb`.
    pub fn weight(&mut self, chunk: usize, mb: u32) -> Result<()> {
        let m = mb as usize;
        let c = self.chunk(chunk)?;
        let passes: Vec<&DispatchPass> = c.layers.iter().map(|l| &l.wgrad[m]).collect();
        submit(&self.gpu, self.timer.as_ref(), &self.slots, &passes)
    }

    /// Copies the output of F (`grad: false`) or B (`grad: true`) of `chunk` for `mb` to the
    /// host; returns the values and the µs the copy and map took (the queue time of an
    /// offloaded send).
    pub fn read_out(&self, chunk: usize, mb: u32, grad: bool) -> Result<(Vec<f32>, f64)> {
        let m = mb as usize;
        let c = self.chunk(chunk)?;
        let src = if grad {
            &c.dx[m]
        } else {
            &c.layers.last().expect("at least one layer").y[m]
        };
        // The host buffer is made before the clock starts, and the copy lands in it directly.
        let mut out = vec![0f32; src.size() as usize / 4];
        let t0 = Instant::now();
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(src, 0, &self.staging, 0, src.size());
        let idx = self.gpu.queue.submit([enc.finish()]);
        self.gpu
            .map_read_into(&self.staging, bytemuck::cast_slice_mut(&mut out), Some(idx))?;
        Ok((out, t0.elapsed().as_secs_f64() * 1e6))
    }

    /// Every chunk's weight gradients against an f64 reference of its layers from the inputs
    /// and gradients it saw in the last iteration: the largest relative error.
    pub fn verify(&self) -> Result<f64> {
        let mut worst = 0f64;
        for c in self.chunks() {
            worst = worst.max(c.verify(&self.gpu, &self.shape)?);
        }
        Ok(worst)
    }
}

/// Runs one op: its passes in one compute pass, timestamped in the next slot if one is left.
fn submit(
    gpu: &Gpu,
    timer: Option<&PassTimer>,
    slots: &std::cell::Cell<u32>,
    passes: &[&DispatchPass],
) -> Result<()> {
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    let encode = |p: &mut wgpu::ComputePass<'_>| {
        for pass in passes {
            pass.encode(p);
        }
    };
    match timer {
        Some(t) if slots.get() < t.capacity() => {
            t.record_pass(&mut enc, slots.get(), None, encode);
            slots.set(slots.get() + 1);
        }
        _ => record_untimed(&mut enc, None, encode),
    }
    let idx = gpu.queue.submit([enc.finish()]);
    gpu.wait(idx)?;
    Ok(())
}
