//! `pto scenes [NAME]`: what each registered scene accepts in a scene file.

use pto_chip::diag::json_line;
use pto_scene::Scene;
use pto_scene::params::{cut, key_list};
use pto_scene::scene::{JsonScene, find_scene, scene_names};

use crate::args::ScenesArgs;
use crate::{InputError, Outcome};

pub(crate) fn run(args: &ScenesArgs) -> anyhow::Result<Outcome> {
    let scenes: Vec<&'static dyn Scene> = match &args.name {
        Some(name) => vec![find_scene(name).map_err(|_| {
            InputError(format!(
                "no scene named {:?} (scenes: {})",
                cut(name),
                key_list(scene_names().into_iter())
            ))
        })?],
        None => pto_scene::scene::scenes().to_vec(),
    };
    for scene in scenes {
        if args.json {
            crate::print_out(&json_line(&JsonScene::of(scene)));
        } else {
            crate::print_out(&describe(scene));
        }
    }
    Ok(Outcome::Success)
}

fn level(scene: &dyn Scene) -> u32 {
    scene.level().number()
}

/// The text block of one scene.
fn describe(scene: &dyn Scene) -> String {
    let b = scene.worker_bounds();
    let mut out = format!(
        "{} (level {}): device_count {}..={}, num_sub_workers {}..={}\n",
        scene.name(),
        level(scene),
        b.device_count.0,
        b.device_count.1,
        b.num_sub_workers.0,
        b.num_sub_workers.1
    );
    out.push_str("  params:\n");
    for p in scene.params() {
        let fast = p
            .fast_default
            .map(|f| format!(", --fast {f}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "    {:<16} {:<22} default {}{fast}  {}\n",
            p.name,
            p.range(),
            p.default,
            p.doc
        ));
    }
    if scene.labels().is_empty() {
        out.push_str("  labels: none (size its tasks with config.runtime_env)\n");
    } else {
        out.push_str("  labels (config.tasks.<label>):\n");
        for l in scene.labels() {
            out.push_str(&format!("    {:<16} {}\n", l.spelling(), l.doc));
        }
    }
    out
}
