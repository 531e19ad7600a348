# Summary of a folded-stack profile (one stack per line, "frame;frame;... count"):
# inclusive and self shares per function. Usage: python3 fold_summary.py folded_N.txt
import sys,collections
for fn in sys.argv[1:]:
    incl=collections.Counter(); leaf=collections.Counter(); tot=0
    for line in open(fn):
        s,c=line.rstrip().rsplit(' ',1); c=int(c); tot+=c
        fr=s.split(';')
        for f in set(fr): incl[f]+=c
        leaf[fr[-1]]+=c
    print("==",fn,"samples",tot)
    print("-- inclusive")
    for f,c in incl.most_common(45): print(f"{100*c/tot:6.1f}% {f[:150]}")
    print("-- self")
    for f,c in leaf.most_common(30): print(f"{100*c/tot:6.1f}% {f[:150]}")
