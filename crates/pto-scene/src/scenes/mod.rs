//! The shipped scenes. Each has a TOML file of cases under `scenes/` at the repository root.

mod fanout;
mod l2;
mod l3;
mod remote;

use crate::scene::Scene;

/// Every built-in scene.
pub(crate) static ALL: &[&dyn Scene] = &[
    &l2::VectorExample,
    &l2::PagedAttention,
    &l2::WarHazard,
    &l3::PerTaskRuntimeEnv,
    &l3::MultiChipDispatch,
    &fanout::HeterogeneousFanout,
    &remote::RemoteFanout,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config_block::CaseConfig;
    use crate::params::Params;

    /// Every declaration is usable: unique names, `min <= default <= max`, bounds a TOML
    /// integer can write, and the defaults pass the scene's own cross-param check.
    #[test]
    fn every_scene_declares_sane_params() {
        for scene in ALL {
            let specs = scene.params();
            for (i, p) in specs.iter().enumerate() {
                let at = format!("{}.{}", scene.name(), p.name);
                assert!(!specs[..i].iter().any(|q| q.name == p.name), "{at} twice");
                assert!(p.min <= p.default && p.default <= p.max, "{at}");
                assert!(p.fast_default.is_none_or(|f| (p.min..=p.max).contains(&f)));
                assert!(
                    p.max <= i64::MAX as u64,
                    "{at}: max cannot be written in TOML"
                );
                assert!(!p.doc.is_empty(), "{at} has no doc");
            }
            let defaults = Params::defaults(specs);
            scene
                .validate(&defaults, &CaseConfig::default())
                .unwrap_or_else(|e| panic!("{}: defaults fail: {e}", scene.name()));
            let b = scene.worker_bounds();
            assert!(b.device_count.0 >= 1 && b.device_count.1 <= 64);
            assert!(b.num_sub_workers.0 <= b.num_sub_workers.1);
        }
    }

    fn pa_check(text: &str) -> Result<(), String> {
        let scene = &l2::PagedAttention;
        let params = Params::parse(scene.params(), &toml::from_str(text).unwrap())?;
        scene.validate(&params, &CaseConfig::default())
    }

    #[test]
    fn paged_attention_rejects_mismatched_shapes() {
        assert_eq!(
            pa_check("block = 100").unwrap_err(),
            "params.max_model_len = 4096 (default) must be a multiple of params.block = 100"
        );
        assert_eq!(
            pa_check("ctx = 8192").unwrap_err(),
            "params.ctx = 8192 must not exceed params.max_model_len = 4096 (default)"
        );
        let big =
            pa_check("batch = 256\nblock = 1024\nctx = 65536\nmax_model_len = 65536").unwrap_err();
        assert!(big.contains("at most 268435456 bytes"), "{big}");
        let tasks = pa_check("block = 1\nctx = 4096").unwrap_err();
        assert!(
            tasks.contains("submit 16385 tasks; at most 16384"),
            "{tasks}"
        );
        pa_check("batch = 32\nctx = 4096\nmax_model_len = 32768").unwrap();
    }
}
