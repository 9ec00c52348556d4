use super::check::*;
use super::spool::*;

#[test]
fn parked_runs_are_a_warning_up_to_the_threshold() {
    let check = |parked, threshold| parked_check("counts".into(), parked, threshold);
    let none = check(0, Some(0));
    assert_eq!((none.ok, none.level, none.repair), (true, Level::Ok, None));
    for (parked, threshold) in [(3, None), (3, Some(3)), (1, Some(5))] {
        let c = check(parked, threshold);
        assert_eq!(
            (c.ok, c.level),
            (true, Level::Warning),
            "{parked} {threshold:?}"
        );
        assert!(c.repair.unwrap().contains("cairn run retry ID"));
    }
    for (parked, threshold) in [(4, Some(3)), (1, Some(0))] {
        let c = check(parked, threshold);
        assert_eq!(
            (c.ok, c.level),
            (false, Level::Problem),
            "{parked} {threshold:?}"
        );
        assert!(c.detail.contains("doctor.parked_threshold"), "{}", c.detail);
    }
    let json = serde_json::to_value(check(1, None)).unwrap();
    assert_eq!(
        (&json["ok"], &json["level"]),
        (&true.into(), &"warning".into())
    );
}
