//! The stand-in kernel's calibration, alone in its own test binary so no other test competes
//! for the CPU that lavapipe runs on while it is timed.

#[test]
fn standin_calibration_is_within_20_percent() {
    use morphbench::gpu::standin::StandIn;
    use morphbench::gpu::{BackendChoice, Gpu};
    let gpu = Gpu::open(BackendChoice::Auto, None).unwrap();
    let act = gpu.storage_from("activation", &[1.0f32; 64]);
    let s = StandIn::calibrate(&gpu, &act).unwrap();
    for p in s.check(&gpu, &act, &[2.0, 10.0, 50.0]).unwrap() {
        let err = (p.achieved_us / p.asked_us - 1.0).abs();
        assert!(
            err < 0.20,
            "asked {} µs, achieved {} µs",
            p.asked_us,
            p.achieved_us
        );
    }
}
