//! The reproduction page's template and manifest agree with the experiment files: every
//! placeholder names an experiment the manifest runs and selects exactly one of its points,
//! so `meridian experiment reproduce` cannot fail on a typo after minutes of running, and
//! the committed page is a rendering (no placeholder left in it).

use meridian_bench::experiment::{self, Overrides};
use meridian_bench::reproduce::{placeholders, Manifest};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_placeholder_selects_one_point_of_a_manifest_experiment() {
    let root = root();
    let manifest = Manifest::load(&root.join("experiments/reproduce.toml")).expect("manifest");
    let mut points = BTreeMap::new();
    for run in &manifest.runs {
        let exp = experiment::load(&root.join(&run.file)).expect("experiment file");
        let params: Vec<_> = experiment::points(&exp, &Overrides::default())
            .expect("points")
            .into_iter()
            .map(|(params, _)| params)
            .collect();
        assert!(
            points.insert(exp.name.clone(), params).is_none(),
            "{} twice in the manifest",
            exp.name
        );
    }
    let template =
        std::fs::read_to_string(root.join("docs/REPRODUCTION.template.md")).expect("template");
    let found = placeholders(&template).expect("placeholders parse");
    assert!(
        found.len() > 100,
        "the template fills its numbers from results"
    );
    for (line, p) in found.into_iter().filter_map(|(l, p)| p.map(|p| (l, p))) {
        let Some(params) = points.get(&p.experiment) else {
            panic!("line {line}: `{}` is not in the manifest", p.experiment);
        };
        let matching = params.iter().filter(|have| p.matches(have)).count();
        assert_eq!(
            matching, 1,
            "line {line}: {:?} selects {matching} points of {}",
            p.select, p.experiment
        );
    }
}

#[test]
fn the_committed_page_is_a_rendering() {
    let page = std::fs::read_to_string(root().join("docs/REPRODUCTION.md")).expect("page");
    assert!(
        !page.contains("{{"),
        "docs/REPRODUCTION.md holds a placeholder"
    );
    assert!(
        page.contains("This page is generated"),
        "docs/REPRODUCTION.md is not rendered from the template"
    );
}

/// Every experiment file, the manifest's and those not (yet) on the page, parses and
/// expands to its points, under a name no other file uses (results go to `results/NAME`).
#[test]
fn every_experiment_file_parses_under_its_own_name() {
    let root = root();
    let mut names = BTreeMap::new();
    let dir = "experiments";
    for entry in std::fs::read_dir(root.join(dir)).expect("experiments dir") {
        let path = entry.expect("dir entry").path();
        let is_experiment = path.extension().is_some_and(|e| e == "toml")
            && path.file_name().is_some_and(|n| n != "reproduce.toml");
        if !is_experiment {
            continue;
        }
        let exp = experiment::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        experiment::points(&exp, &Overrides::default())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Some(other) = names.insert(exp.name.clone(), path.clone()) {
            panic!(
                "{} and {} are both `{}`",
                other.display(),
                path.display(),
                exp.name
            );
        }
    }
    assert!(names.len() > 20, "{} experiment files", names.len());
}
