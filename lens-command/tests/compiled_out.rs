//! `lens` built without its `otel` feature: the commands that read files
//! work (the other tests of this crate run in that build too), and `lens
//! recover`, which exports, says that it cannot, naming the feature, with
//! exit status 2. (In a build with `otel` this binary holds no test.)

#![cfg(not(feature = "otel"))]
#![expect(dead_code, reason = "this binary uses a part of the support module")]

mod support;
use support::{lens, temp_dir};

#[test]
fn recover_without_otel_says_it_cannot_export_and_names_the_feature() {
    let dir = temp_dir("compiled-out");
    let (code, stdout, stderr) = lens(&["recover".as_ref(), dir.as_path()]);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert_eq!(
        stderr,
        "lens: error: recover: this `lens` was built without its `otel` feature, so it cannot export; rebuild it \
         with default features\n"
    );
}
