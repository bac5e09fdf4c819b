//! Cross-implementation check: the exact mode agrees with scikit-learn's
//! IsotonicRegression to 1e-9 (fixtures from scripts/make_isotonic_fixtures.py).

use serde_json::Value;
use wmrl_core::IsotonicMap;

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

#[test]
fn exact_mode_matches_scikit_learn() {
    let text = include_str!("fixtures/isotonic_sklearn.json");
    let root: Value = serde_json::from_str(text).expect("fixture json");
    let cases = root["cases"].as_array().expect("cases");
    assert!(cases.len() >= 10);
    let mut checked = 0;
    for (i, c) in cases.iter().enumerate() {
        let (x, y, w) = (floats(&c["x"]), floats(&c["y"]), floats(&c["w"]));
        let map = IsotonicMap::fit_exact(&x, &y, &w).expect("fit");
        for (p, e) in floats(&c["probes"]).iter().zip(floats(&c["expected"])) {
            let got = map.eval(*p);
            assert!(
                (got - e).abs() < 1e-9,
                "case {i} at {p}: {got} vs sklearn {e}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 600);
}
