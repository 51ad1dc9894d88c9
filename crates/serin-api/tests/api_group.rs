//! The API group chosen at start-up names every URL and `apiVersion` (a process of its own, since
//! the group is process-wide).

use kube::Resource;
use serin_api::group::{ApiGroup, api_group, set_api_group};
use serin_api::{AlertProvider, Canary, MetricTemplate};

#[test]
fn the_group_chosen_at_start_names_urls_api_versions_and_the_finalizer() {
    let canary = Canary::new("podinfo", Default::default());
    assert_eq!(
        serde_json::to_value(&canary).unwrap()["apiVersion"],
        "serin.dev/v1beta1"
    );
    assert_eq!(
        Canary::url_path(&(), Some("test")),
        "/apis/serin.dev/v1beta1/namespaces/test/canaries"
    );
    assert_eq!(api_group().finalizer(), "finalizer.serin.dev");

    set_api_group(ApiGroup::Flagger);
    let json = serde_json::to_value(&canary).unwrap();
    assert_eq!(json["apiVersion"], "flagger.app/v1beta1");
    assert_eq!(json["kind"], "Canary");
    assert_eq!(
        MetricTemplate::url_path(&(), Some("test")),
        "/apis/flagger.app/v1beta1/namespaces/test/metrictemplates"
    );
    assert_eq!(
        AlertProvider::url_path(&(), None),
        "/apis/flagger.app/v1beta1/alertproviders"
    );
    assert_eq!(api_group().finalizer(), "finalizer.flagger.app");
    // What the operator reads back decodes whatever the group.
    let read: Canary = serde_json::from_value(json).unwrap();
    assert_eq!(read, canary);

    assert_eq!(
        "flagger.example".parse::<ApiGroup>().unwrap_err(),
        "unknown API group 'flagger.example': use serin.dev (Serin's CRDs) or flagger.app (Flagger's CRDs)"
    );
}
