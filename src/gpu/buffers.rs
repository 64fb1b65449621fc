//! Buffer helpers: storage buffers from host data, poisoning, and reading results back.

use wgpu::util::DeviceExt;

use super::{Gpu, GpuError};

/// Bit pattern written into outputs before a kernel runs: a quiet NaN no arithmetic produces,
/// so an element the kernel never wrote is told apart from one it got wrong.
pub const POISON_BITS: u32 = 0x7fc0_dead;

impl Gpu {
    pub fn storage_from<T: bytemuck::Pod>(&self, label: &str, data: &[T]) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::cast_slice(data),
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
            })
    }

    pub fn uniform_from<T: bytemuck::Pod>(&self, label: &str, value: &T) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::bytes_of(value),
                usage: wgpu::BufferUsages::UNIFORM,
            })
    }

    /// Copies a buffer of `height` rows of `width` vec4<f32> into a new rgba32float texture
    /// (one texel per vec4). `None` if the shape does not fit the adapter's texture limits or
    /// a row is not a whole number of 256-byte copy rows.
    pub fn texture_from(
        &self,
        label: &str,
        buffer: &wgpu::Buffer,
        width: u32,
        height: u32,
    ) -> Result<Option<wgpu::Texture>, GpuError> {
        let max = self.limits.max_texture_dimension_2d;
        let row_bytes = width * 16;
        if width > max
            || height > max
            || !row_bytes.is_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT)
        {
            return Ok(None);
        }
        let extent = wgpu::Extent3d {
            width,
            height,
            depth_or_array_layers: 1,
        };
        let texture = self.device.create_texture(&wgpu::TextureDescriptor {
            label: Some(label),
            size: extent,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu::TextureFormat::Rgba32Float,
            usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
            view_formats: &[],
        });
        self.submit_wait(|enc| {
            enc.copy_buffer_to_texture(
                wgpu::TexelCopyBufferInfo {
                    buffer,
                    layout: wgpu::TexelCopyBufferLayout {
                        offset: 0,
                        bytes_per_row: Some(row_bytes),
                        rows_per_image: Some(height),
                    },
                },
                wgpu::TexelCopyTextureInfo {
                    texture: &texture,
                    mip_level: 0,
                    origin: wgpu::Origin3d::ZERO,
                    aspect: wgpu::TextureAspect::All,
                },
                extent,
            );
        })?;
        Ok(Some(texture))
    }

    /// Overwrites a whole f32 buffer with [`POISON_BITS`].
    pub fn poison(&self, buffer: &wgpu::Buffer) {
        let words = (buffer.size() / 4) as usize;
        self.queue
            .write_buffer(buffer, 0, bytemuck::cast_slice(&vec![POISON_BITS; words]));
    }

    /// Copies a buffer into a fresh mappable one and returns its bytes (not for timed code).
    pub fn read_back(&self, buffer: &wgpu::Buffer) -> Result<Vec<u8>, GpuError> {
        let size = buffer.size();
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.submit_wait(|enc| enc.copy_buffer_to_buffer(buffer, 0, &staging, 0, size))?;
        self.map_read(&staging)
    }

    /// Maps a finished MAP_READ buffer, copies its bytes out and unmaps it.
    pub fn map_read(&self, staging: &wgpu::Buffer) -> Result<Vec<u8>, GpuError> {
        let slice = staging.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| GpuError::Device(e.to_string()))?;
        rx.recv()
            .map_err(|_| GpuError::Device("map callback never ran".into()))?
            .map_err(|e| GpuError::Device(format!("map failed: {e}")))?;
        let bytes = slice
            .get_mapped_range()
            .map_err(|e| GpuError::Device(format!("mapped range: {e}")))?
            .to_vec();
        staging.unmap();
        Ok(bytes)
    }
}
