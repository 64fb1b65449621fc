//! The command line's names for the project's enums: clap stays in `cli`, the enums stay
//! plain where they live.

use clap::builder::PossibleValue;
use clap::ValueEnum;

use crate::bench::fleet::checks::Level;
use crate::bench::hol::Mode;
use crate::bench::pipeline::exec::Comm;
use crate::gpu::BackendChoice;
use crate::report::plot::charts::Format;
use crate::sim::CommModel;
use crate::transport::TransportKind;

/// `value_enum!(Type { Type::A => "a", Type::B => "b": "help" })`: the names (and help) a
/// flag takes for each variant, in the order `--help` lists them.
macro_rules! value_enum {
    ($ty:ty { $($variant:path => $name:literal $(: $help:literal)?),* $(,)? }) => {
        impl ValueEnum for $ty {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($variant),*]
            }
            fn to_possible_value(&self) -> Option<PossibleValue> {
                Some(match self {
                    $($variant => PossibleValue::new($name)$(.help($help))?),*
                })
            }
        }
    };
}

value_enum!(Level {
    Level::Health => "health": "quick's tests in short deadlines (morphbench health): at most 45 s a node of 8 GPUs",
    Level::Quick => "quick": "inventory, memcpy, GEMM, D2H, H2D, FMA and bandwidth ceilings: at most 60 s a rank",
    Level::Standard => "standard": "longer and larger: at most 5 minutes a rank",
    Level::Extended => "extended": "the largest sizes: at most 20 minutes a rank",
});

value_enum!(BackendChoice {
    BackendChoice::Auto => "auto",
    BackendChoice::Vulkan => "vulkan",
    BackendChoice::Gl => "gl",
    BackendChoice::Metal => "metal",
    BackendChoice::Dx12 => "dx12",
});

value_enum!(TransportKind {
    TransportKind::Tcp => "tcp",
    TransportKind::Rdma => "rdma",
});

value_enum!(Mode {
    Mode::None => "none",
    Mode::Inline => "inline",
    Mode::Offload => "offload",
});

value_enum!(Comm {
    Comm::Inline => "inline",
    Comm::Offload => "offload",
});

value_enum!(Format {
    Format::Png => "png",
    Format::Svg => "svg",
    Format::Both => "both",
});

value_enum!(CommModel {
    CommModel::Latency => "latency": "Pure latency, off the compute queue",
    CommModel::Queue => "queue": "The sender's queue is blocked for the whole transfer (head-of-line blocking)",
    CommModel::Offload => "offload": "The sender pays a device-to-host copy on its queue; the rest travels off the queue",
});

#[cfg(test)]
mod tests {
    use super::*;

    /// The flag names are the enums' own Display names, so CSV columns, configs and flags agree.
    #[test]
    fn flag_names_match_display_names() {
        fn check<T: ValueEnum + std::fmt::Display>() {
            for v in T::value_variants() {
                let name = v.to_possible_value().unwrap().get_name().to_string();
                assert_eq!(name, v.to_string());
            }
        }
        check::<TransportKind>();
        check::<Mode>();
        check::<Comm>();
        check::<CommModel>();
        check::<Level>();
    }
}
